#include "ferry/quant/internal/dequantize_avx2.h"

#include <immintrin.h>

#include "ferry/quant/block_formats.h"

namespace ferry::quant::quant_internal {
namespace {

inline __m256 Scale(uint16_t half) { return _mm256_set1_ps(_cvtsh_ss(half)); }

// The 32 nibbles of `qs` as two vectors of 16 bytes each: low nibbles are
// elements 0-15, high nibbles 16-31.
inline void Nibbles(const uint8_t* qs, __m128i& lo, __m128i& hi) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  lo = _mm_and_si128(bytes, mask);
  hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
}

// Writes d * (q + offset) + m (m absent: no add) for 16 unsigned bytes q.
template <bool kHasMin>
inline void Store16(__m128i q, int offset, __m256 d, __m256 m, float* y) {
  const __m256i lo =
      _mm256_add_epi32(_mm256_cvtepu8_epi32(q), _mm256_set1_epi32(offset));
  const __m256i hi = _mm256_add_epi32(
      _mm256_cvtepu8_epi32(_mm_srli_si128(q, 8)), _mm256_set1_epi32(offset));
  __m256 a = _mm256_mul_ps(d, _mm256_cvtepi32_ps(lo));
  __m256 b = _mm256_mul_ps(d, _mm256_cvtepi32_ps(hi));
  if constexpr (kHasMin) {
    a = _mm256_add_ps(a, m);
    b = _mm256_add_ps(b, m);
  }
  _mm256_storeu_ps(y, a);
  _mm256_storeu_ps(y + 8, b);
}

void Q4_0(const BlockQ4_0* x, float* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, y += kQK) {
    const __m256 d = Scale(x[b].d);
    __m128i lo, hi;
    Nibbles(x[b].qs, lo, hi);
    Store16<false>(lo, -8, d, d, y);
    Store16<false>(hi, -8, d, d, y + 16);
  }
}

void Q4_1(const BlockQ4_1* x, float* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, y += kQK) {
    const __m256 d = Scale(x[b].d);
    const __m256 m = Scale(x[b].m);
    __m128i lo, hi;
    Nibbles(x[b].qs, lo, hi);
    Store16<true>(lo, 0, d, m, y);
    Store16<true>(hi, 0, d, m, y + 16);
  }
}

void Q8_0(const BlockQ8_0* x, float* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, y += kQK) {
    const __m256 d = Scale(x[b].d);
    for (int j = 0; j < kQK; j += 8) {
      const __m128i q =
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[b].qs + j));
      _mm256_storeu_ps(
          y + j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
    }
  }
}

}  // namespace

bool DequantizeBlocksAvx2(QuantType type, const void* src, float* dst,
                          int64_t blocks) {
  switch (type) {
    case QuantType::kQ4_0:
      Q4_0(static_cast<const BlockQ4_0*>(src), dst, blocks);
      return true;
    case QuantType::kQ4_1:
      Q4_1(static_cast<const BlockQ4_1*>(src), dst, blocks);
      return true;
    case QuantType::kQ8_0:
      Q8_0(static_cast<const BlockQ8_0*>(src), dst, blocks);
      return true;
    default:
      return false;
  }
}

}  // namespace ferry::quant::quant_internal
