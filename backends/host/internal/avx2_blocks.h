// Block helpers of the AVX2 quantized kernels (vec_dot_avx2.cc,
// vec_dot_k_avx2.cc and quant_tile_avx2.cc). Include only from files compiled
// with -mavx2 -mfma -mf16c.
#ifndef FERRY_BACKENDS_HOST_INTERNAL_AVX2_BLOCKS_H_
#define FERRY_BACKENDS_HOST_INTERNAL_AVX2_BLOCKS_H_

#include <immintrin.h>

#include <cstdint>

namespace ferry::host_avx2 {

inline float Half(uint16_t bits) { return _cvtsh_ss(bits); }

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 int32 partial sums of unsigned bytes u (< 128) times signed bytes a.
inline __m256i DotUnsigned(__m256i u, __m256i a) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1));
}

// 8 int32 partial sums of the 32 products of signed bytes w and a (the
// sign trick: |w| unsigned times sign(w) * a; a must not hold -128).
inline __m256i DotSigned(__m256i w, __m256i a) {
  const __m256i pairs =
      _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// The 32 nibbles of a q4 block as bytes in element order.
inline __m256i Nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// acc + x in 16-bit (epi16) or 32-bit (epi32) lanes, in the order written:
// the empty asm hides the sum from the optimizer, so GCC cannot reassociate
// a tile's chain of adds into a tree whose many live terms spill to the
// stack (the q4_1 tile at 32 tokens ran 10% slower so, on Zen 1).
inline void AddInOrderEpi16(__m256i& acc, __m256i x) {
  acc = _mm256_add_epi16(acc, x);
  asm("" : "+x"(acc));
}

inline void AddInOrderEpi32(__m256i& acc, __m256i x) {
  acc = _mm256_add_epi32(acc, x);
  asm("" : "+x"(acc));
}

inline __m256i Load32(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

}  // namespace ferry::host_avx2

#endif  // FERRY_BACKENDS_HOST_INTERNAL_AVX2_BLOCKS_H_
