// Scalar vec_dot kernels of the K and iq4 weight formats with their q8_K
// (iq4_nl: q8_0) activations: the reference the AVX2 ones are tested
// against. Each super-block's products are summed as integers per sub-block,
// scaled by the sub-block's integer scale, and multiplied by the float
// factors once; minimums use the activation's per-16 sums (bsums).
#include <cstdint>

#include "ferry/backends/host/internal/vec_dot_kernels.h"
#include "ferry/quant/block_formats.h"
#include "ferry/quant/internal/k_scales.h"
#include "ferry/quant/internal/scales.h"

namespace ferry::quant::quant_internal {
namespace {

// Sum over 16-element sub-blocks s of scale[s] * sum_l q[16 s + l] a[..].
int ScaledSum16(const int8_t* q, const int8_t* a, const int* scale) {
  int total = 0;
  for (int s = 0; s < kQK_K / 16; ++s) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += q[16 * s + l] * a[16 * s + l];
    total += scale[s] * sum;
  }
  return total;
}

float DotQ2_K(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int8_t q[kQK_K];
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, g = (e / 32) % 4, l = e % 32;
      q[e] = static_cast<int8_t>((x[b].qs[32 * h + l] >> (2 * g)) & 3);
    }
    int scale[16], mins = 0;
    for (int s = 0; s < 16; ++s) {
      scale[s] = x[b].scales[s] & 0x0F;
      mins += (x[b].scales[s] >> 4) * y[b].bsums[s];
    }
    const int isum = ScaledSum16(q, y[b].qs, scale);
    sum += y[b].d * HalfToFloat(x[b].d) * static_cast<float>(isum) -
           y[b].d * HalfToFloat(x[b].dmin) * static_cast<float>(mins);
  }
  return sum;
}

float DotQ3_K(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int8_t q[kQK_K];
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, g = (e / 32) % 4, l = e % 32;
      const int low = (x[b].qs[32 * h + l] >> (2 * g)) & 3;
      const int high = (x[b].hmask[l] >> (4 * h + g)) & 1;
      q[e] = static_cast<int8_t>(low + 4 * high - 4);
    }
    int8_t sc[16];
    UnpackScalesQ3K(x[b].scales, sc);
    int scale[16];
    for (int s = 0; s < 16; ++s) scale[s] = sc[s];
    const int isum = ScaledSum16(q, y[b].qs, scale);
    sum += y[b].d * HalfToFloat(x[b].d) * static_cast<float>(isum);
  }
  return sum;
}

// q4_K and q5_K once their quants are unpacked into q.
float ScaleMinBlock(const uint8_t packed[12], uint16_t d, uint16_t dmin,
                    const int8_t* q, const BlockQ8_K& y) {
  uint8_t sc[8], m[8];
  UnpackScaleMinK4(packed, sc, m);
  int isum = 0, mins = 0;
  for (int s = 0; s < 8; ++s) {
    int dot = 0;
    for (int l = 0; l < 32; ++l) dot += q[32 * s + l] * y.qs[32 * s + l];
    isum += sc[s] * dot;
    mins += m[s] * (y.bsums[2 * s] + y.bsums[2 * s + 1]);
  }
  return y.d * HalfToFloat(d) * static_cast<float>(isum) -
         y.d * HalfToFloat(dmin) * static_cast<float>(mins);
}

float DotQ4_K(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int8_t q[kQK_K];
    for (int e = 0; e < kQK_K; ++e) {
      q[e] = static_cast<int8_t>(
          (x[b].qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 0x0F);
    }
    sum += ScaleMinBlock(x[b].scales, x[b].d, x[b].dmin, q, y[b]);
  }
  return sum;
}

float DotQ5_K(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int8_t q[kQK_K];
    for (int e = 0; e < kQK_K; ++e) {
      const int low =
          (x[b].qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 0x0F;
      const int high = (x[b].qh[e % 32] >> (e / 32)) & 1;
      q[e] = static_cast<int8_t>(low | (high << 4));
    }
    sum += ScaleMinBlock(x[b].scales, x[b].d, x[b].dmin, q, y[b]);
  }
  return sum;
}

float DotQ6_K(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int8_t q[kQK_K];
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, g = (e / 32) % 4, l = e % 32;
      const int low =
          (x[b].ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0x0F;
      const int high = (x[b].qh[32 * h + l] >> (2 * g)) & 3;
      q[e] = static_cast<int8_t>((low | (high << 4)) - 32);
    }
    int scale[16];
    for (int s = 0; s < 16; ++s) scale[s] = x[b].scales[s];
    const int isum = ScaledSum16(q, y[b].qs, scale);
    sum += y[b].d * HalfToFloat(x[b].d) * static_cast<float>(isum);
  }
  return sum;
}

// 32 grid values of nibbles ordered as q4_0's dotted with 32 activations.
int Iq4Dot(const uint8_t* qs, const int8_t* a) {
  int sum = 0;
  for (int j = 0; j < 16; ++j) {
    sum += kIq4NlValues[qs[j] & 0x0F] * a[j];
    sum += kIq4NlValues[qs[j] >> 4] * a[j + 16];
  }
  return sum;
}

float DotIQ4_NL(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    sum += HalfToFloat(x[b].d) * HalfToFloat(y[b].d) *
           static_cast<float>(Iq4Dot(x[b].qs, y[b].qs));
  }
  return sum;
}

float DotIQ4_XS(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int isum = 0;
    for (int s = 0; s < 8; ++s) {
      isum += ScaleIQ4XS(x[b], s) * Iq4Dot(x[b].qs + 16 * s, y[b].qs + 32 * s);
    }
    sum += y[b].d * HalfToFloat(x[b].d) * static_cast<float>(isum);
  }
  return sum;
}

}  // namespace

VecDotFn ScalarVecDotK(QuantType weight) {
  switch (weight) {
    case QuantType::kQ2_K:
      return DotQ2_K;
    case QuantType::kQ3_K:
      return DotQ3_K;
    case QuantType::kQ4_K:
      return DotQ4_K;
    case QuantType::kQ5_K:
      return DotQ5_K;
    case QuantType::kQ6_K:
      return DotQ6_K;
    case QuantType::kIQ4_NL:
      return DotIQ4_NL;
    case QuantType::kIQ4_XS:
      return DotIQ4_XS;
    default:
      return nullptr;
  }
}

}  // namespace ferry::quant::quant_internal
