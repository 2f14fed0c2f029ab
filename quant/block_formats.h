// The byte layouts of ggml's 32-element block formats, written from their
// published description (ggml-common.h, GGUF docs): each block stores one or
// two f16 scale factors and 32 small integers.
//
//   q4_0: x = d * (q - 8),        q in [0, 15], two per byte
//   q4_1: x = d * q + m,          q in [0, 15], two per byte
//   q5_0: x = d * (q - 16),       q in [0, 31]: a nibble plus a bit of qh
//   q5_1: x = d * q + m,          q in [0, 31]
//   q8_0: x = d * q,              q in [-127, 127]
//   q8_1: x = d * q, s = d * sum(q): an activation format for q4_1 dots
//
// Nibbles: byte j holds element j in its low half and element j + 16 in its
// high half; for q5, bit j of the little-endian u32 qh is element j's fifth
// bit. All fields are little-endian; the structs have no padding.
#ifndef FERRY_QUANT_BLOCK_FORMATS_H_
#define FERRY_QUANT_BLOCK_FORMATS_H_

#include <cstdint>

namespace ferry::quant {

inline constexpr int kQK = 32;  // Elements per block of every type here.

struct BlockQ4_0 {
  uint16_t d;  // f16 scale.
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ4_1 {
  uint16_t d;  // f16 scale.
  uint16_t m;  // f16 minimum.
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {
  uint16_t d;     // f16 scale.
  uint8_t qh[4];  // Fifth bits.
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {
  uint16_t d;  // f16 scale.
  uint16_t m;  // f16 minimum.
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

struct BlockQ8_0 {
  uint16_t d;  // f16 scale.
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ8_1 {
  uint16_t d;  // f16 scale.
  uint16_t s;  // f16 of d * sum(qs).
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_1) == 36);

}  // namespace ferry::quant

#endif  // FERRY_QUANT_BLOCK_FORMATS_H_
