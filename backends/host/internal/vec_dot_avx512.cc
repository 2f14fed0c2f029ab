// AVX-512 vec_dot kernels (compiled with -mavx512f -mavx512bw -mavx512vl
// -mfma -mf16c; for tests also on SIMDe, avx512_intrinsics.h): quantized
// types take two blocks per 512-bit register, with per-lane scales; float types
// 16 elements per step. AVX-512 has no sign_epi8, so the sign trick negates `a`
// under the mask of negative `w`.
#include "ferry/backends/host/internal/avx512_intrinsics.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() values, which
// -Wuninitialized flags once inlined; they are set before use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstdint>

#include "ferry/backends/host/internal/vec_dot_kernels.h"
#include "ferry/quant/block_formats.h"

namespace ferry::quant::quant_internal {
FERRY_AVX512_BEGIN
namespace {

inline float Half(uint16_t bits) { return _cvtsh_ss(bits); }

inline float ReduceAdd(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
  __m128 s = _mm512_castps512_ps128(v);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m512i Join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

inline __m256i Load32(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// The 64 nibbles of two q4 blocks (each 16 bytes at `qs0`, `qs1`) as bytes
// in element order: [lo(b0) hi(b0) lo(b1) hi(b1)], 16 bytes each.
inline __m512i Nibbles2(const uint8_t* qs0, const uint8_t* qs1) {
  const __m256i raw =
      _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(qs1),
                          reinterpret_cast<const __m128i*>(qs0));
  // Lanes [qs0, qs0, qs1, qs1]; shift the odd lanes down a nibble.
  const __m512i dup = _mm512_shuffle_i64x2(_mm512_castsi256_si512(raw),
                                           _mm512_castsi256_si512(raw), 0x50);
  const __m512i shifted = _mm512_mask_srli_epi16(dup, 0xFF00FF00u, dup, 4);
  return _mm512_and_si512(shifted, _mm512_set1_epi8(0x0F));
}

// 16 int32 partial sums of signed bytes w times signed bytes a (a != -128).
inline __m512i DotSigned(__m512i w, __m512i a) {
  const __mmask64 negative = _mm512_movepi8_mask(w);
  const __m512i signed_a =
      _mm512_mask_sub_epi8(a, negative, _mm512_setzero_si512(), a);
  const __m512i pairs = _mm512_maddubs_epi16(_mm512_abs_epi8(w), signed_a);
  return _mm512_madd_epi16(pairs, _mm512_set1_epi16(1));
}

inline __m512i DotUnsigned(__m512i u, __m512i a) {
  return _mm512_madd_epi16(_mm512_maddubs_epi16(u, a), _mm512_set1_epi16(1));
}

// Lanes 0-7 scaled by s0, lanes 8-15 by s1.
inline __m512 Scales(float s0, float s1) {
  return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(s0), _mm512_set1_ps(s1));
}

float DotQ4_0Q8_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  const int64_t blocks = n / kQK;
  const __m512i eight = _mm512_set1_epi8(8);
  __m512 acc = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const __m512i q = _mm512_sub_epi8(Nibbles2(x[b].qs, x[b + 1].qs), eight);
    const __m512i a = Join(Load32(y[b].qs), Load32(y[b + 1].qs));
    const __m512 p = _mm512_cvtepi32_ps(DotSigned(q, a));
    acc = _mm512_fmadd_ps(Scales(Half(x[b].d) * Half(y[b].d),
                                 Half(x[b + 1].d) * Half(y[b + 1].d)),
                          p, acc);
  }
  float sum = ReduceAdd(acc);
  for (; b < blocks; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      isum += ((x[b].qs[j] & 0x0F) - 8) * y[b].qs[j];
      isum += ((x[b].qs[j] >> 4) - 8) * y[b].qs[j + 16];
    }
    sum += static_cast<float>(isum) * Half(x[b].d) * Half(y[b].d);
  }
  return sum;
}

float DotQ4_1Q8_1(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(act);
  const int64_t blocks = n / kQK;
  __m512 acc = _mm512_setzero_ps();
  float mins = 0;
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const __m512i q = Nibbles2(x[b].qs, x[b + 1].qs);
    const __m512i a = Join(Load32(y[b].qs), Load32(y[b + 1].qs));
    const __m512 p = _mm512_cvtepi32_ps(DotUnsigned(q, a));
    acc = _mm512_fmadd_ps(Scales(Half(x[b].d) * Half(y[b].d),
                                 Half(x[b + 1].d) * Half(y[b + 1].d)),
                          p, acc);
    mins += Half(x[b].m) * Half(y[b].s) + Half(x[b + 1].m) * Half(y[b + 1].s);
  }
  float sum = ReduceAdd(acc) + mins;
  for (; b < blocks; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      isum += (x[b].qs[j] & 0x0F) * y[b].qs[j];
      isum += (x[b].qs[j] >> 4) * y[b].qs[j + 16];
    }
    sum += static_cast<float>(isum) * Half(x[b].d) * Half(y[b].d) +
           Half(x[b].m) * Half(y[b].s);
  }
  return sum;
}

float DotQ8_0Q8_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  const int64_t blocks = n / kQK;
  __m512 acc = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const __m512i q = Join(Load32(x[b].qs), Load32(x[b + 1].qs));
    const __m512i a = Join(Load32(y[b].qs), Load32(y[b + 1].qs));
    const __m512 p = _mm512_cvtepi32_ps(DotSigned(q, a));
    acc = _mm512_fmadd_ps(Scales(Half(x[b].d) * Half(y[b].d),
                                 Half(x[b + 1].d) * Half(y[b + 1].d)),
                          p, acc);
  }
  float sum = ReduceAdd(acc);
  for (; b < blocks; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK; ++j) isum += x[b].qs[j] * y[b].qs[j];
    sum += static_cast<float>(isum) * Half(x[b].d) * Half(y[b].d);
  }
  return sum;
}

// Float weights: `Load16` widens 16 weights at `w + i` to f32; the tail
// uses a masked load of the same width.
template <__m512 (*Load16)(const void*, int64_t, __mmask16)>
float DotFloat(const void* w, const void* act, int64_t n) {
  const auto* y = static_cast<const float*>(act);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(Load16(w, i, 0xFFFF), _mm512_loadu_ps(y + i), acc0);
    acc1 = _mm512_fmadd_ps(Load16(w, i + 16, 0xFFFF),
                           _mm512_loadu_ps(y + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16
                            ? __mmask16{0xFFFF}
                            : static_cast<__mmask16>((1u << (n - i)) - 1);
    acc0 =
        _mm512_fmadd_ps(Load16(w, i, m), _mm512_maskz_loadu_ps(m, y + i), acc0);
  }
  return ReduceAdd(_mm512_add_ps(acc0, acc1));
}

__m512 LoadF32(const void* w, int64_t i, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, static_cast<const float*>(w) + i);
}
__m512 LoadF16(const void* w, int64_t i, __mmask16 m) {
  return _mm512_cvtph_ps(
      _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(w) + i));
}
__m512 LoadBF16(const void* w, int64_t i, __mmask16 m) {
  const __m256i h =
      _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(w) + i);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

}  // namespace

VecDotFn Avx512VecDot(QuantType weight) {
  switch (weight) {
    case QuantType::kQ4_0:
      return DotQ4_0Q8_0;
    case QuantType::kQ4_1:
      return DotQ4_1Q8_1;
    case QuantType::kQ8_0:
      return DotQ8_0Q8_0;
    case QuantType::kF32:
      return DotFloat<LoadF32>;
    case QuantType::kF16:
      return DotFloat<LoadF16>;
    case QuantType::kBF16:
      return DotFloat<LoadBF16>;
    default:
      // q5 types: no kernel of its own; the AVX2 one (AVX-512 CPUs have AVX2).
      return Avx2VecDot(weight);
  }
}

FERRY_AVX512_END
}  // namespace ferry::quant::quant_internal
