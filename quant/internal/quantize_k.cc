#include "ferry/quant/internal/quantize_k.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ferry/quant/block_formats.h"
#include "ferry/quant/internal/k_scales.h"
#include "ferry/quant/internal/scales.h"

namespace ferry::quant::quant_internal {
namespace {

// Round to nearest, ties to even (the default rounding mode), as ggml's
// quantizers round.
inline int Nearest(float v) { return static_cast<int>(std::lrintf(v)); }

inline float Inverse(float d) { return d != 0 ? 1.0f / d : 0.0f; }

void QuantizeQ8_K(const float* x, BlockQ8_K& y) {
  // The value of largest magnitude, with its sign, maps to -127.
  float amax = 0, max = 0;
  for (int j = 0; j < kQK_K; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  std::memset(&y, 0, sizeof(y));
  if (amax == 0) return;
  const float iscale = -127.0f / max;
  for (int j = 0; j < kQK_K; ++j) {
    y.qs[j] = static_cast<int8_t>(std::min(127, Nearest(iscale * x[j])));
  }
  for (int j = 0; j < kQK_K / 16; ++j) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += y.qs[16 * j + i];
    y.bsums[j] = static_cast<int16_t>(sum);
  }
  y.d = 1.0f / iscale;
}

// Scales and minimums of `subs` sub-blocks of `len` elements for unsigned
// quants in [0, qmax]: x ~ scale * q - min, min >= 0.
struct ScaleMin {
  float scale[16];
  float min[16];
};

ScaleMin SubBlockRanges(const float* x, int subs, int len, int qmax) {
  ScaleMin r;
  for (int s = 0; s < subs; ++s) {
    float lo = 0, hi = 0;  // Zero stays in range: mins are non-negative.
    for (int i = 0; i < len; ++i) {
      lo = std::min(lo, x[s * len + i]);
      hi = std::max(hi, x[s * len + i]);
    }
    r.scale[s] = (hi - lo) / static_cast<float>(qmax);
    r.min[s] = -lo;
  }
  return r;
}

// Rounds `values` (non-negative) to integers in [0, levels] times a common
// f16 factor, returned; writes the integers to `out`.
float QuantizeFactors(const float* values, int count, int levels,
                      uint8_t* out) {
  float max = 0;
  for (int s = 0; s < count; ++s) max = std::max(max, values[s]);
  const uint16_t d16 = FloatToHalf(max / static_cast<float>(levels));
  const float id = Inverse(HalfToFloat(d16));
  for (int s = 0; s < count; ++s) {
    out[s] =
        static_cast<uint8_t>(std::clamp(Nearest(values[s] * id), 0, levels));
  }
  return HalfToFloat(d16);
}

// Element quants for a sub-block with effective scale `d` and minimum `m`:
// q = round((x + m) / d) in [0, qmax].
inline int QuantOf(float x, float d, float m, int qmax) {
  return std::clamp(Nearest((x + m) * Inverse(d)), 0, qmax);
}

void QuantizeQ2_K(const float* x, BlockQ2_K& y) {
  const ScaleMin r = SubBlockRanges(x, 16, 16, 3);
  uint8_t sc[16], m[16];
  const float d = QuantizeFactors(r.scale, 16, 15, sc);
  const float dmin = QuantizeFactors(r.min, 16, 15, m);
  y.d = FloatToHalf(d);
  y.dmin = FloatToHalf(dmin);
  std::memset(y.qs, 0, sizeof(y.qs));
  for (int s = 0; s < 16; ++s) {
    y.scales[s] = static_cast<uint8_t>(sc[s] | (m[s] << 4));
  }
  for (int e = 0; e < kQK_K; ++e) {
    const int s = e / 16;
    const int q = QuantOf(x[e], d * sc[s], dmin * m[s], 3);
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    y.qs[32 * h + l] |= static_cast<uint8_t>(q << (2 * g));
  }
}

// Signed scales in [-levels - 1, levels] of sub-blocks of `len` with signed
// quants in [-qneg, qneg - 1]: each sub-block's value of largest magnitude,
// with its sign, maps to -qneg (as q4_0 maps it to -8), so both ends of the
// range are used. Returns the f16 factor d.
float SignedScales(const float* x, int subs, int len, int qneg, int levels,
                   int8_t* sc) {
  float scale[16], max = 0;
  for (int s = 0; s < subs; ++s) {
    float amax = 0, signed_max = 0;
    for (int i = 0; i < len; ++i) {
      if (std::fabs(x[s * len + i]) > amax) {
        amax = std::fabs(x[s * len + i]);
        signed_max = x[s * len + i];
      }
    }
    scale[s] = signed_max / static_cast<float>(-qneg);
    max = std::max(max, amax / static_cast<float>(qneg));
  }
  const uint16_t d16 = FloatToHalf(max / static_cast<float>(levels));
  const float id = Inverse(HalfToFloat(d16));
  for (int s = 0; s < subs; ++s) {
    sc[s] = static_cast<int8_t>(
        std::clamp(Nearest(scale[s] * id), -levels - 1, levels));
  }
  return HalfToFloat(d16);
}

void QuantizeQ3_K(const float* x, BlockQ3_K& y) {
  int8_t sc[16];
  const float d = SignedScales(x, 16, 16, 4, 31, sc);
  y.d = FloatToHalf(d);
  PackScalesQ3K(sc, y.scales);
  std::memset(y.hmask, 0, sizeof(y.hmask));
  std::memset(y.qs, 0, sizeof(y.qs));
  for (int e = 0; e < kQK_K; ++e) {
    const float dl = d * static_cast<float>(sc[e / 16]);
    const int q = std::clamp(Nearest(x[e] * Inverse(dl)), -4, 3) + 4;
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    y.qs[32 * h + l] |= static_cast<uint8_t>((q & 3) << (2 * g));
    y.hmask[l] |= static_cast<uint8_t>((q >> 2) << (4 * h + g));
  }
}

// q4_K and q5_K: writes d, dmin and scales; returns each sub-block's
// effective scale and minimum.
template <typename Block>
ScaleMin ScaleMinK4(const float* x, int qmax, Block& y) {
  const ScaleMin r = SubBlockRanges(x, 8, 32, qmax);
  uint8_t sc[8], m[8];
  const float d = QuantizeFactors(r.scale, 8, 63, sc);
  const float dmin = QuantizeFactors(r.min, 8, 63, m);
  y.d = FloatToHalf(d);
  y.dmin = FloatToHalf(dmin);
  PackScaleMinK4(sc, m, y.scales);
  ScaleMin eff;
  for (int s = 0; s < 8; ++s) {
    eff.scale[s] = d * static_cast<float>(sc[s]);
    eff.min[s] = dmin * static_cast<float>(m[s]);
  }
  return eff;
}

void QuantizeQ4_K(const float* x, BlockQ4_K& y) {
  const ScaleMin eff = ScaleMinK4(x, 15, y);
  std::memset(y.qs, 0, sizeof(y.qs));
  for (int e = 0; e < kQK_K; ++e) {
    const int s = e / 32;
    const int q = QuantOf(x[e], eff.scale[s], eff.min[s], 15);
    y.qs[32 * (e / 64) + e % 32] |= static_cast<uint8_t>(q << (4 * (s % 2)));
  }
}

void QuantizeQ5_K(const float* x, BlockQ5_K& y) {
  const ScaleMin eff = ScaleMinK4(x, 31, y);
  std::memset(y.qs, 0, sizeof(y.qs));
  std::memset(y.qh, 0, sizeof(y.qh));
  for (int e = 0; e < kQK_K; ++e) {
    const int s = e / 32;
    const int q = QuantOf(x[e], eff.scale[s], eff.min[s], 31);
    y.qs[32 * (e / 64) + e % 32] |=
        static_cast<uint8_t>((q & 0x0F) << (4 * (s % 2)));
    y.qh[e % 32] |= static_cast<uint8_t>((q >> 4) << s);
  }
}

void QuantizeQ6_K(const float* x, BlockQ6_K& y) {
  const float d = SignedScales(x, 16, 16, 32, 127, y.scales);
  y.d = FloatToHalf(d);
  std::memset(y.ql, 0, sizeof(y.ql));
  std::memset(y.qh, 0, sizeof(y.qh));
  for (int e = 0; e < kQK_K; ++e) {
    const float dl = d * static_cast<float>(y.scales[e / 16]);
    const int q = std::clamp(Nearest(x[e] * Inverse(dl)), -32, 31) + 32;
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    y.ql[64 * h + 32 * (g % 2) + l] |=
        static_cast<uint8_t>((q & 0x0F) << (4 * (g / 2)));
    y.qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * g));
  }
}

// The index of the iq4 grid value nearest to `v`.
int NearestIq4(float v) {
  int best = 0;
  for (int i = 1; i < 16; ++i) {
    if (std::fabs(v - kIq4NlValues[i]) < std::fabs(v - kIq4NlValues[best])) {
      best = i;
    }
  }
  return best;
}

// 32 elements as grid indices at scale `dl`, nibbles ordered as q4_0's.
void Iq4Nibbles(const float* x, float dl, uint8_t* qs) {
  const float id = Inverse(dl);
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>(NearestIq4(x[j] * id) |
                                 (NearestIq4(x[j + 16] * id) << 4));
  }
}

// The scale of 32 elements that maps the one of largest magnitude onto the
// grid's end of the same sign's magnitude, -127.
float Iq4Scale(const float* x) {
  float amax = 0, max = 0;
  for (int j = 0; j < kQK; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max / static_cast<float>(kIq4NlValues[0]);
}

void QuantizeIQ4_NL(const float* x, BlockIQ4_NL& y) {
  y.d = FloatToHalf(Iq4Scale(x));
  Iq4Nibbles(x, HalfToFloat(y.d), y.qs);
}

void QuantizeIQ4_XS(const float* x, BlockIQ4_XS& y) {
  float scale[8], amax = 0;
  for (int j = 0; j < 8; ++j) {
    scale[j] = Iq4Scale(x + 32 * j);
    amax = std::max(amax, std::fabs(scale[j]));
  }
  y.d = FloatToHalf(amax / 32);
  const float d = HalfToFloat(y.d);
  y.scales_h = 0;
  std::memset(y.scales_l, 0, sizeof(y.scales_l));
  for (int j = 0; j < 8; ++j) {
    const int l = std::clamp(Nearest(scale[j] * Inverse(d)), -32, 31);
    const int ls = l + 32;
    y.scales_l[j / 2] |= static_cast<uint8_t>((ls & 0x0F) << (4 * (j % 2)));
    y.scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * j));
    Iq4Nibbles(x + 32 * j, d * static_cast<float>(l), y.qs + 16 * j);
  }
}

// Applies `fn` to each of `blocks` blocks of `elements` elements.
template <typename Block>
void Each(const float* src, void* dst, int64_t blocks,
          void (*fn)(const float*, Block&), int64_t elements = kQK_K) {
  auto* y = static_cast<Block*>(dst);
  for (int64_t b = 0; b < blocks; ++b) fn(src + b * elements, y[b]);
}

}  // namespace

bool QuantizeKBlocks(QuantType type, const float* src, void* dst,
                     int64_t blocks) {
  switch (type) {
    case QuantType::kQ2_K:
      Each(src, dst, blocks, QuantizeQ2_K);
      return true;
    case QuantType::kQ3_K:
      Each(src, dst, blocks, QuantizeQ3_K);
      return true;
    case QuantType::kQ4_K:
      Each(src, dst, blocks, QuantizeQ4_K);
      return true;
    case QuantType::kQ5_K:
      Each(src, dst, blocks, QuantizeQ5_K);
      return true;
    case QuantType::kQ6_K:
      Each(src, dst, blocks, QuantizeQ6_K);
      return true;
    case QuantType::kQ8_K:
      Each(src, dst, blocks, QuantizeQ8_K);
      return true;
    case QuantType::kIQ4_NL:
      Each(src, dst, blocks, QuantizeIQ4_NL, kQK);
      return true;
    case QuantType::kIQ4_XS:
      Each(src, dst, blocks, QuantizeIQ4_XS);
      return true;
    default:
      return false;
  }
}

}  // namespace ferry::quant::quant_internal
