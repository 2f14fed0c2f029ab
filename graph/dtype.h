// Element types of ferry tensors and scalar conversions between them.
//
// Every dtype has a block size (elements per block) and a block's byte size:
// for the plain types a block is one element; the quantized types are ggml's
// block formats of 32 or 256 elements (layouts in quant/block_formats.h), so a
// row of ne0 elements takes ne0 / block_size * block_bytes bytes and ne0
// must be a multiple of the block size. Only mul_mat (as the weight) and
// get_rows (as the table) accept quantized tensors; other ops refuse them.
#ifndef FERRY_GRAPH_DTYPE_H_
#define FERRY_GRAPH_DTYPE_H_

#include <bit>
#include <cstdint>
#include <cstring>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry {

enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kI32 = 3,
  kQ4_0 = 4,
  kQ4_1 = 5,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 9,
  kQ3_K = 10,
  kQ4_K = 11,
  kQ5_K = 12,
  kQ6_K = 13,
  kIQ4_NL = 14,
  kIQ4_XS = 15,
};

inline constexpr int kNumDTypes = 16;

struct DTypeTraits {
  absl::string_view name;
  int64_t block_size;   // Elements per block.
  int64_t block_bytes;  // Bytes per block.
  bool is_float;        // A plain float type (f32, f16, bf16).
};

// Returns the traits of `dtype`.
const DTypeTraits& GetDTypeTraits(DType dtype);

inline absl::string_view DTypeName(DType dtype) {
  return GetDTypeTraits(dtype).name;
}
inline int64_t DTypeBlockSize(DType dtype) {
  return GetDTypeTraits(dtype).block_size;
}
inline int64_t DTypeBlockBytes(DType dtype) {
  return GetDTypeTraits(dtype).block_bytes;
}
// True for the block-quantized types (block size > 1).
inline bool IsQuantized(DType dtype) { return DTypeBlockSize(dtype) > 1; }

// Parses a dtype's name: "f32", "f16", "bf16", "i32", "q4_0", "q4_1",
// "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl"
// or "iq4_xs".
absl::StatusOr<DType> ParseDType(absl::string_view name);

// IEEE half and bfloat16 storage types. Plain 16-bit payloads: arithmetic is
// done in f32 after conversion.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// Converts f32 to IEEE binary16 with round-to-nearest-even; overflow gives
// infinity, NaN stays NaN.
constexpr Half F32ToF16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN.
    return Half{static_cast<uint16_t>(sign | 0x7c00u |
                                      (abs > 0x7f800000u ? 0x200u : 0u))};
  }
  if (abs >= 0x477ff000u) {  // Rounds to >= 65520: overflow.
    return Half{static_cast<uint16_t>(sign | 0x7c00u)};
  }
  if (abs < 0x38800000u) {  // Subnormal or zero in f16.
    // Scale into the subnormal range with one float addition, which rounds
    // to nearest even exactly like the hardware conversion.
    const float magic = std::bit_cast<float>(0x3f000000u);  // 0.5
    const float shifted = std::bit_cast<float>(abs) + magic;
    return Half{static_cast<uint16_t>(
        sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u))};
  }
  const uint32_t mantissa_odd = (abs >> 13) & 1u;
  const uint32_t rounded = abs + 0xc8000fffu + mantissa_odd;  // Rebias, round.
  return Half{static_cast<uint16_t>(sign | (rounded >> 13))};
}

// Converts IEEE binary16 to f32 exactly.
constexpr float F16ToF32(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1fu) {
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in f32.
    const float magnitude =
        static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) |
                              (mantissa << 13));
}

// Converts f32 to bfloat16 with round-to-nearest-even; NaN stays NaN.
constexpr BFloat16 F32ToBF16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return BFloat16{static_cast<uint16_t>((x >> 16) | 0x40u)};
  }
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>((x + rounding) >> 16)};
}

// Converts bfloat16 to f32 exactly.
constexpr float BF16ToF32(BFloat16 b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b.bits) << 16);
}

}  // namespace ferry

#endif  // FERRY_GRAPH_DTYPE_H_
