// The byte layouts of ggml's block formats, written from their published
// description (ggml-common.h, GGUF docs). The 32-element formats store one
// or two f16 scale factors and 32 small integers:
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
//
// The "K" formats hold super-blocks of 256 elements in sub-blocks of 16 or
// 32, each sub-block with its own small integer scale (and minimum) that
// multiplies the super-block's f16 d (and dmin):
//
//   q2_K: 16 x 16, x = d * sc * q - dmin * m,   q in [0, 3], 4-bit sc, m
//   q3_K: 16 x 16, x = d * (sc - 32) * (q - 4), q in [0, 7], 6-bit sc
//   q4_K:  8 x 32, x = d * sc * q - dmin * m,   q in [0, 15], 6-bit sc, m
//   q5_K:  8 x 32, x = d * sc * q - dmin * m,   q in [0, 31], 6-bit sc, m
//   q6_K: 16 x 16, x = d * sc * (q - 32),       q in [0, 63], int8 sc
//   q8_K: x = d * q (f32 d), with the sums of each 16 quants: activations
//   iq4_nl: 32,    x = d * kIq4NlValues[q],     q in [0, 15]
//   iq4_xs: 8 x 32, x = d * (sc - 32) * kIq4NlValues[q], 6-bit sc
//
// Their element order (which bits of which byte hold element e) is spelled
// out beside each struct; internal/k_scales.h unpacks the scales.
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

inline constexpr int kQK_K = 256;  // Elements per super-block.

// Element e = 128 h + 32 g + l (h < 2, g < 4, l < 32): quant bits 2g..2g+1
// of qs[32 h + l]; sub-block e / 16 has scale (scales[e / 16] & 15) and
// minimum (scales[e / 16] >> 4).
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;     // f16 scale of the scales.
  uint16_t dmin;  // f16 scale of the minimums.
};
static_assert(sizeof(BlockQ2_K) == 84);

// Element e = 128 h + 32 g + l: low bits 2g..2g+1 of qs[32 h + l], high bit
// (worth 4) bit 4h + g of hmask[l]. The 16 six-bit scales (k_scales.h):
// low nibbles in scales[0..7] (j < 8: low half of byte j, else high half
// of byte j - 8), the top two bits in scales[8 + j % 4] at bit 2 (j / 4).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;  // f16.
};
static_assert(sizeof(BlockQ3_K) == 110);

// Element e = 64 c + 32 s + l (c < 4, s < 2, l < 32): the low (s = 0) or high
// (s = 1) nibble of qs[32 c + l]. Sub-block e / 32 has a 6-bit scale and
// minimum packed in `scales` (k_scales.h).
struct BlockQ4_K {
  uint16_t d;     // f16.
  uint16_t dmin;  // f16.
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// As q4_K, plus the fifth bit of element 64 c + 32 s + l: bit 2c + s of
// qh[l].
struct BlockQ5_K {
  uint16_t d;     // f16.
  uint16_t dmin;  // f16.
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// Element e = 128 h + 32 g + l: the low 4 bits are nibble g / 2 of
// ql[64 h + 32 (g % 2) + l], the high 2 bits are bits 2g..2g+1 of
// qh[32 h + l]; sub-block e / 16 has signed scale scales[e / 16].
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;  // f16.
};
static_assert(sizeof(BlockQ6_K) == 210);

struct BlockQ8_K {
  float d;  // f32, unlike every other block.
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // Sum of each 16 consecutive qs.
};
static_assert(sizeof(BlockQ8_K) == 292);

// The 16 values iq4 nibbles index (a non-uniform grid denser near zero).
inline constexpr int8_t kIq4NlValues[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Nibbles ordered as q4_0's.
struct BlockIQ4_NL {
  uint16_t d;  // f16.
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// Sub-block j < 8 of 32 holds nibbles ordered as q4_0's in qs[16 j ..];
// its 6-bit scale is nibble j % 2 of scales_l[j / 2] plus bits 2j..2j+1 of
// scales_h as its top two bits.
struct BlockIQ4_XS {
  uint16_t d;  // f16.
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

}  // namespace ferry::quant

#endif  // FERRY_QUANT_BLOCK_FORMATS_H_
