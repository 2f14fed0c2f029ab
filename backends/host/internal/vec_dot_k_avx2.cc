// AVX2 vec_dot kernels of the K and iq4 weight formats (compiled with
// -mavx2 -mfma -mf16c). Quants are unpacked 32 at a time into unsigned
// bytes, multiplied by the activation bytes with maddubs (pairs stay below
// 2 * 63 * 127, no saturation), and the int16 pair sums of each sub-block
// multiplied by its scale with madd. Offsets (q6_K's 32, q3_K's 4) and
// minimums go through the activation's per-16 sums (bsums), once a block.
#include <immintrin.h>

#include <cstdint>

#include "ferry/backends/host/internal/avx2_blocks.h"
#include "ferry/backends/host/internal/vec_dot_kernels.h"
#include "ferry/quant/block_formats.h"
#include "ferry/quant/internal/k_scales.h"

namespace ferry::quant::quant_internal {
namespace {

using host_avx2::DotSigned;
using host_avx2::Half;
using host_avx2::HorizontalSum;
using host_avx2::Load32;
using host_avx2::Nibbles;

inline __m256i LoadBytes(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Bytes of `v` shifted right by `bits` (< 8), keeping the bits of `mask`.
inline __m256i ShiftMask(__m256i v, int bits, __m256i mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(bits)), mask);
}

// 8 int32 sums of the products of 32 unsigned quants u with activations a,
// the first 16 scaled by s0, the last 16 by s1 (two 16-element sub-blocks).
inline __m256i ScaledDot16(__m256i u, __m256i a, int s0, int s1) {
  const __m256i scales =
      _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(s1)),
                       _mm_set1_epi16(static_cast<int16_t>(s0)));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), scales);
}

// As ScaledDot16 with one scale for all 32 (a 32-element sub-block).
inline __m256i ScaledDot32(__m256i u, __m256i a, int s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a),
                           _mm256_set1_epi16(static_cast<int16_t>(s)));
}

// Sum over 16-element sub-blocks of scale[s] * bsums[s].
inline int ScaledBsums(const int* scale, const int16_t* bsums) {
  int sum = 0;
  for (int s = 0; s < 16; ++s) sum += scale[s] * bsums[s];
  return sum;
}

float DotQ2_K(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  const __m256i three = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int m[16];
    for (int s = 0; s < 16; ++s) m[s] = x[b].scales[s] >> 4;
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = LoadBytes(x[b].qs + 32 * h);
      for (int g = 0; g < 4; ++g) {
        const int s = 8 * h + 2 * g;
        const __m256i q = ShiftMask(qs, 2 * g, three);
        isum = _mm256_add_epi32(isum, ScaledDot16(q, Load32(y[b].qs + 16 * s),
                                                  x[b].scales[s] & 0x0F,
                                                  x[b].scales[s + 1] & 0x0F));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * Half(x[b].d)),
                          _mm256_cvtepi32_ps(isum), acc);
    mins += y[b].d * Half(x[b].dmin) *
            static_cast<float>(ScaledBsums(m, y[b].bsums));
  }
  return HorizontalSum(acc) - mins;
}

float DotQ3_K(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  const __m256i three = _mm256_set1_epi8(3);
  const __m256i one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  float offsets = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int8_t sc8[16];
    UnpackScalesQ3K(x[b].scales, sc8);
    int sc[16];
    for (int s = 0; s < 16; ++s) sc[s] = sc8[s];
    const __m256i hmask = LoadBytes(x[b].hmask);
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = LoadBytes(x[b].qs + 32 * h);
      for (int g = 0; g < 4; ++g) {
        const int s = 8 * h + 2 * g;
        // q + 4 = low bits + 4 * high bit, in [0, 7].
        const __m256i high =
            _mm256_slli_epi16(ShiftMask(hmask, 4 * h + g, one), 2);
        const __m256i q = _mm256_or_si256(ShiftMask(qs, 2 * g, three), high);
        isum = _mm256_add_epi32(
            isum, ScaledDot16(q, Load32(y[b].qs + 16 * s), sc[s], sc[s + 1]));
      }
    }
    const float dd = y[b].d * Half(x[b].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(isum), acc);
    offsets += dd * static_cast<float>(4 * ScaledBsums(sc, y[b].bsums));
  }
  return HorizontalSum(acc) - offsets;
}

// q4_K and q5_K: `quants(c, s)` gives the 32 unsigned quants of sub-block
// 2c + s.
template <typename Block, typename Quants>
float DotScaleMin(const Block* x, const BlockQ8_K* y, int64_t n,
                  Quants quants) {
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    uint8_t sc[8], m[8];
    UnpackScaleMinK4(x[b].scales, sc, m);
    int msum = 0;
    for (int s = 0; s < 8; ++s) {
      msum += m[s] * (y[b].bsums[2 * s] + y[b].bsums[2 * s + 1]);
    }
    __m256i isum = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      __m256i lo, hi;
      quants(x[b], c, &lo, &hi);
      isum = _mm256_add_epi32(
          isum, ScaledDot32(lo, Load32(y[b].qs + 64 * c), sc[2 * c]));
      isum = _mm256_add_epi32(
          isum, ScaledDot32(hi, Load32(y[b].qs + 64 * c + 32), sc[2 * c + 1]));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * Half(x[b].d)),
                          _mm256_cvtepi32_ps(isum), acc);
    mins += y[b].d * Half(x[b].dmin) * static_cast<float>(msum);
  }
  return HorizontalSum(acc) - mins;
}

float DotQ4_K(const void* w, const void* act, int64_t n) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  return DotScaleMin(static_cast<const BlockQ4_K*>(w),
                     static_cast<const BlockQ8_K*>(act), n,
                     [&](const BlockQ4_K& x, int c, __m256i* lo, __m256i* hi) {
                       const __m256i raw = LoadBytes(x.qs + 32 * c);
                       *lo = _mm256_and_si256(raw, low4);
                       *hi = ShiftMask(raw, 4, low4);
                     });
}

float DotQ5_K(const void* w, const void* act, int64_t n) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  return DotScaleMin(
      static_cast<const BlockQ5_K*>(w), static_cast<const BlockQ8_K*>(act), n,
      [&](const BlockQ5_K& x, int c, __m256i* lo, __m256i* hi) {
        const __m256i raw = LoadBytes(x.qs + 32 * c);
        const __m256i qh = LoadBytes(x.qh);
        // Fifth bits as 16: one bit per byte shifted within its byte.
        const __m256i h0 = _mm256_slli_epi16(ShiftMask(qh, 2 * c, one), 4);
        const __m256i h1 = _mm256_slli_epi16(ShiftMask(qh, 2 * c + 1, one), 4);
        *lo = _mm256_or_si256(_mm256_and_si256(raw, low4), h0);
        *hi = _mm256_or_si256(ShiftMask(raw, 4, low4), h1);
      });
}

float DotQ6_K(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i three = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps();
  float offsets = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int sc[16];
    for (int s = 0; s < 16; ++s) sc[s] = x[b].scales[s];
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qh = LoadBytes(x[b].qh + 32 * h);
      const __m256i ql[2] = {LoadBytes(x[b].ql + 64 * h),
                             LoadBytes(x[b].ql + 64 * h + 32)};
      for (int g = 0; g < 4; ++g) {
        const int s = 8 * h + 2 * g;
        const __m256i low = ShiftMask(ql[g % 2], 4 * (g / 2), low4);
        const __m256i high = _mm256_slli_epi16(ShiftMask(qh, 2 * g, three), 4);
        const __m256i q = _mm256_or_si256(low, high);  // q + 32, in [0, 63].
        isum = _mm256_add_epi32(
            isum, ScaledDot16(q, Load32(y[b].qs + 16 * s), sc[s], sc[s + 1]));
      }
    }
    const float dd = y[b].d * Half(x[b].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(isum), acc);
    offsets += dd * static_cast<float>(32 * ScaledBsums(sc, y[b].bsums));
  }
  return HorizontalSum(acc) - offsets;
}

// The iq4 grid values of the 32 nibbles at `qs` (q4_0 order), as bytes.
inline __m256i Iq4Values(const uint8_t* qs) {
  const __m128i grid =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues));
  return _mm256_shuffle_epi8(_mm256_set_m128i(grid, grid), Nibbles(qs));
}

float DotIQ4_NL(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256 p =
        _mm256_cvtepi32_ps(DotSigned(Iq4Values(x[b].qs), Load32(y[b].qs)));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(Half(x[b].d) * Half(y[b].d)), p, acc);
  }
  return HorizontalSum(acc);
}

float DotIQ4_XS(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    __m256i isum = _mm256_setzero_si256();
    for (int s = 0; s < 8; ++s) {
      const __m256i p =
          DotSigned(Iq4Values(x[b].qs + 16 * s), Load32(y[b].qs + 32 * s));
      isum = _mm256_add_epi32(
          isum, _mm256_mullo_epi32(p, _mm256_set1_epi32(ScaleIQ4XS(x[b], s))));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * Half(x[b].d)),
                          _mm256_cvtepi32_ps(isum), acc);
  }
  return HorizontalSum(acc);
}

}  // namespace

VecDotFn Avx2VecDotK(QuantType weight) {
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
