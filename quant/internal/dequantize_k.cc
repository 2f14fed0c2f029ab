#include "ferry/quant/internal/dequantize_k.h"

#include "ferry/quant/block_formats.h"
#include "ferry/quant/internal/k_scales.h"
#include "ferry/quant/internal/scales.h"

namespace ferry::quant::quant_internal {
namespace {

void DequantizeQ2_K(const BlockQ2_K& x, float* y) {
  const float d = HalfToFloat(x.d);
  const float dmin = HalfToFloat(x.dmin);
  for (int e = 0; e < kQK_K; ++e) {
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    const int q = (x.qs[32 * h + l] >> (2 * g)) & 3;
    const uint8_t sc = x.scales[e / 16];
    const float dl = d * static_cast<float>(sc & 0x0F);
    const float ml = dmin * static_cast<float>(sc >> 4);
    y[e] = dl * static_cast<float>(q) - ml;
  }
}

void DequantizeQ3_K(const BlockQ3_K& x, float* y) {
  const float d = HalfToFloat(x.d);
  int8_t sc[16];
  UnpackScalesQ3K(x.scales, sc);
  for (int e = 0; e < kQK_K; ++e) {
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    const int low = (x.qs[32 * h + l] >> (2 * g)) & 3;
    const int high = (x.hmask[l] >> (4 * h + g)) & 1;
    const float dl = d * static_cast<float>(sc[e / 16]);
    y[e] = dl * static_cast<float>(low + 4 * high - 4);
  }
}

// q4_K and q5_K: `q` gives element e's quant.
template <typename Block, typename Quant>
void DequantizeScaleMin(const Block& x, float* y, Quant q) {
  const float d = HalfToFloat(x.d);
  const float dmin = HalfToFloat(x.dmin);
  uint8_t sc[8], m[8];
  UnpackScaleMinK4(x.scales, sc, m);
  for (int e = 0; e < kQK_K; ++e) {
    const float d1 = d * static_cast<float>(sc[e / 32]);
    const float m1 = dmin * static_cast<float>(m[e / 32]);
    y[e] = d1 * static_cast<float>(q(e)) - m1;
  }
}

// Element e = 64 c + 32 s + l of a q4_K / q5_K nibble array.
inline int Nibble(const uint8_t* qs, int e) {
  return (qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 0x0F;
}

void DequantizeQ4_K(const BlockQ4_K& x, float* y) {
  DequantizeScaleMin(x, y, [&](int e) { return Nibble(x.qs, e); });
}

void DequantizeQ5_K(const BlockQ5_K& x, float* y) {
  DequantizeScaleMin(x, y, [&](int e) {
    return Nibble(x.qs, e) | (((x.qh[e % 32] >> (e / 32)) & 1) << 4);
  });
}

void DequantizeQ6_K(const BlockQ6_K& x, float* y) {
  const float d = HalfToFloat(x.d);
  for (int e = 0; e < kQK_K; ++e) {
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    const int low = (x.ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0x0F;
    const int high = (x.qh[32 * h + l] >> (2 * g)) & 3;
    const float dl = d * static_cast<float>(x.scales[e / 16]);
    y[e] = dl * static_cast<float>((low | (high << 4)) - 32);
  }
}

void DequantizeQ8_K(const BlockQ8_K& x, float* y) {
  for (int e = 0; e < kQK_K; ++e) y[e] = x.d * static_cast<float>(x.qs[e]);
}

// 32 elements of nibbles ordered as q4_0's, times `dl`.
inline void Iq4Values(const uint8_t* qs, float dl, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = dl * static_cast<float>(kIq4NlValues[qs[j] & 0x0F]);
    y[j + 16] = dl * static_cast<float>(kIq4NlValues[qs[j] >> 4]);
  }
}

void DequantizeIQ4_NL(const BlockIQ4_NL& x, float* y) {
  Iq4Values(x.qs, HalfToFloat(x.d), y);
}

void DequantizeIQ4_XS(const BlockIQ4_XS& x, float* y) {
  const float d = HalfToFloat(x.d);
  for (int j = 0; j < 8; ++j) {
    Iq4Values(x.qs + 16 * j, d * static_cast<float>(ScaleIQ4XS(x, j)),
              y + 32 * j);
  }
}

// Applies `fn` to each of `blocks` blocks of `elements` elements.
template <typename Block>
void Each(const void* src, float* dst, int64_t blocks,
          void (*fn)(const Block&, float*), int64_t elements = kQK_K) {
  const auto* x = static_cast<const Block*>(src);
  for (int64_t b = 0; b < blocks; ++b) fn(x[b], dst + b * elements);
}

}  // namespace

bool IsKType(QuantType type) {
  switch (type) {
    case QuantType::kQ2_K:
    case QuantType::kQ3_K:
    case QuantType::kQ4_K:
    case QuantType::kQ5_K:
    case QuantType::kQ6_K:
    case QuantType::kQ8_K:
    case QuantType::kIQ4_NL:
    case QuantType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

bool DequantizeKBlocks(QuantType type, const void* src, float* dst,
                       int64_t blocks) {
  switch (type) {
    case QuantType::kQ2_K:
      Each(src, dst, blocks, DequantizeQ2_K);
      return true;
    case QuantType::kQ3_K:
      Each(src, dst, blocks, DequantizeQ3_K);
      return true;
    case QuantType::kQ4_K:
      Each(src, dst, blocks, DequantizeQ4_K);
      return true;
    case QuantType::kQ5_K:
      Each(src, dst, blocks, DequantizeQ5_K);
      return true;
    case QuantType::kQ6_K:
      Each(src, dst, blocks, DequantizeQ6_K);
      return true;
    case QuantType::kQ8_K:
      Each(src, dst, blocks, DequantizeQ8_K);
      return true;
    case QuantType::kIQ4_NL:
      Each(src, dst, blocks, DequantizeIQ4_NL, kQK);
      return true;
    case QuantType::kIQ4_XS:
      Each(src, dst, blocks, DequantizeIQ4_XS);
      return true;
    default:
      return false;
  }
}

}  // namespace ferry::quant::quant_internal
