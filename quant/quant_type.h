// QuantType: ggml's tensor element types, with the ids GGUF files store, and
// their block geometry (elements per block, bytes per block).
//
// Every type a GGUF file may name is listed, so a reader can size and
// validate any tensor; `QuantTypeInfo::has_kernels` says which ones this
// package can also dequantize and take dot products of.
//
// Use:
//   FERRY_ASSIGN_OR_RETURN(QuantType type, QuantTypeFromId(raw_id));
//   FERRY_ASSIGN_OR_RETURN(int64_t bytes, RowBytesChecked(type, n));
#ifndef FERRY_QUANT_QUANT_TYPE_H_
#define FERRY_QUANT_QUANT_TYPE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry::quant {

// Values are ggml's `enum ggml_type` ids as stored in GGUF tensor infos.
// Gaps (4, 5, 31-33, 36-38) are ids ggml retired; files never use them.
enum class QuantType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
};

struct QuantTypeInfo {
  QuantType type;
  absl::string_view name;  // ggml's name, e.g. "q4_1".
  int64_t block_size;      // Elements per block.
  int64_t block_bytes;     // Bytes per block.
  // DequantizeRow and VecDot support this type as a weight.
  bool has_kernels;
};

// Returns the info of a known type id, or nullptr.
const QuantTypeInfo* FindQuantTypeInfo(uint32_t id);

// Returns the type with ggml id `id`, or InvalidArgument naming the id.
absl::StatusOr<QuantType> QuantTypeFromId(uint32_t id);

// Returns the info of `type` (every enumerator has one).
const QuantTypeInfo& GetQuantTypeInfo(QuantType type);

inline absl::string_view QuantTypeName(QuantType type) {
  return GetQuantTypeInfo(type).name;
}
inline int64_t BlockSize(QuantType type) {
  return GetQuantTypeInfo(type).block_size;
}
inline int64_t BlockBytes(QuantType type) {
  return GetQuantTypeInfo(type).block_bytes;
}

// Bytes of a row of `n` elements. `n` must be a multiple of BlockSize(type).
inline int64_t RowBytes(QuantType type, int64_t n) {
  const QuantTypeInfo& info = GetQuantTypeInfo(type);
  return n / info.block_size * info.block_bytes;
}

// Like RowBytes, for untrusted `n`: InvalidArgument if `n` is negative, not
// a multiple of the block size, or the byte count overflows int64.
absl::StatusOr<int64_t> RowBytesChecked(QuantType type, int64_t n);

}  // namespace ferry::quant

#endif  // FERRY_QUANT_QUANT_TYPE_H_
