// Unpacking and packing the sub-block scales of the K block formats
// (block_formats.h), shared by dequantize, quantize and the vec_dot kernels.
#ifndef FERRY_QUANT_INTERNAL_K_SCALES_H_
#define FERRY_QUANT_INTERNAL_K_SCALES_H_

#include <cstdint>

#include "ferry/quant/block_formats.h"

namespace ferry::quant::quant_internal {

// q4_K / q5_K: the 8 six-bit scales and minimums from their 12 bytes. Bytes
// 0-3 hold scales 0-3, bytes 4-7 minimums 0-3 (low 6 bits each); scales and
// minimums 4-7 keep their low nibbles in bytes 8-11 and their top two bits
// in the spare top bits of bytes 0-3 and 4-7.
inline void UnpackScaleMinK4(const uint8_t packed[12], uint8_t sc[8],
                             uint8_t m[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = packed[j] & 63;
    m[j] = packed[j + 4] & 63;
    sc[j + 4] =
        static_cast<uint8_t>((packed[j + 8] & 0x0F) | ((packed[j] >> 6) << 4));
    m[j + 4] = static_cast<uint8_t>((packed[j + 8] >> 4) |
                                    ((packed[j + 4] >> 6) << 4));
  }
}

// The inverse of UnpackScaleMinK4; every input must be < 64.
inline void PackScaleMinK4(const uint8_t sc[8], const uint8_t m[8],
                           uint8_t packed[12]) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    packed[j + 8] =
        static_cast<uint8_t>((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
  }
}

// q3_K: the 16 scales, already less their offset of 32 (in [-32, 31]).
inline void UnpackScalesQ3K(const uint8_t packed[12], int8_t sc[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? packed[j] & 0x0F : packed[j - 8] >> 4;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    sc[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

// The inverse of UnpackScalesQ3K; every input must be in [-32, 31].
inline void PackScalesQ3K(const int8_t sc[16], uint8_t packed[12]) {
  for (int i = 0; i < 12; ++i) packed[i] = 0;
  for (int j = 0; j < 16; ++j) {
    const int v = sc[j] + 32;
    packed[j % 8] |= static_cast<uint8_t>((v & 0x0F) << (j < 8 ? 0 : 4));
    packed[8 + j % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (j / 4)));
  }
}

// iq4_xs: sub-block j's scale, less its offset of 32 (in [-32, 31]).
inline int ScaleIQ4XS(const BlockIQ4_XS& x, int j) {
  const int low = (x.scales_l[j / 2] >> (4 * (j % 2))) & 0x0F;
  const int high = (x.scales_h >> (2 * j)) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace ferry::quant::quant_internal

#endif  // FERRY_QUANT_INTERNAL_K_SCALES_H_
