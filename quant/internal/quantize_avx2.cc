#include "ferry/quant/internal/quantize_avx2.h"

#include <immintrin.h>

#include <cstdint>

namespace ferry::quant::quant_internal {

using quant::kQK;

float QuantizeQ8BlockAvx2(const float* x, int8_t* qs, int* sum) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    // max returns its second operand when either is NaN: NaNs are skipped,
    // as std::max(amax, NaN) skips them in the scalar code.
    amax = _mm256_max_ps(_mm256_andnot_ps(sign_bit, v[i]), amax);
  }
  __m128 m =
      _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float amax_scalar = _mm_cvtss_f32(m);
  const float id = amax_scalar != 0 ? 127 / amax_scalar : 0.0f;
  __m256i q[4];
  for (int i = 0; i < 4; ++i) {
    const __m256 y = _mm256_mul_ps(v[i], _mm256_set1_ps(id));
    q[i] = _mm256_cvtps_epi32(
        _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  const __m256i sums = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
                                        _mm256_add_epi32(q[2], q[3]));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sums),
                            _mm256_extracti128_si256(sums, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  *sum = _mm_cvtsi128_si32(s);
  // Narrow to bytes; the packs interleave 128-bit lanes, the permute puts
  // the 32 values back in order.
  const __m256i w01 = _mm256_packs_epi32(q[0], q[1]);
  const __m256i w23 = _mm256_packs_epi32(q[2], q[3]);
  const __m256i b = _mm256_packs_epi16(w01, w23);
  const __m256i ordered =
      _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), ordered);
  return amax_scalar / 127;
}

void QuantizeQ8_0RowAvx2(const float* x, BlockQ8_0* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += kQK) {
    int sum;
    y[b].d = _cvtss_sh(QuantizeQ8BlockAvx2(x, y[b].qs, &sum),
                       _MM_FROUND_TO_NEAREST_INT);
  }
}

void QuantizeQ8_1RowAvx2(const float* x, BlockQ8_1* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += kQK) {
    int sum;
    const float d = QuantizeQ8BlockAvx2(x, y[b].qs, &sum);
    y[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    y[b].s = _cvtss_sh(static_cast<float>(sum) * d, _MM_FROUND_TO_NEAREST_INT);
  }
}

}  // namespace ferry::quant::quant_internal
