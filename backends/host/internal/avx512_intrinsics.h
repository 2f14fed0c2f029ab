// The AVX-512 intrinsics for kernel files compiled with AVX-512 flags, or,
// where the build defines FERRY_AVX512_EMULATED (the *_emulated test
// libraries, compiled with AVX2 flags only), SIMD Everywhere's portable
// versions under the same names, so that the AVX-512 kernels' tests run on
// CPUs (and CI machines) without AVX-512. Include it instead of
// <immintrin.h>, and put the file's external symbols between
// FERRY_AVX512_BEGIN and FERRY_AVX512_END: the emulated build puts them in a
// namespace `emulated`, so that both builds can link into one test.
#ifndef FERRY_BACKENDS_HOST_INTERNAL_AVX512_INTRINSICS_H_
#define FERRY_BACKENDS_HOST_INTERNAL_AVX512_INTRINSICS_H_

#ifdef FERRY_AVX512_EMULATED

#if defined(__AVX512F__)
#error "FERRY_AVX512_EMULATED is for builds without AVX-512 flags"
#endif

// SIMDe's headers are not written for ferry's -Wall -Wextra -Werror.
#pragma GCC system_header
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

// SIMDe 0.7.4 aliases _mm512_madd_epi16 to the masked form (4 arguments).
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16(a, b)

// Intrinsics SIMDe 0.7.4 has under its own name only.
#define _mm512_shuffle_f32x4(a, b, imm8) simde_mm512_shuffle_f32x4(a, b, imm8)
#define _mm512_shuffle_i64x2(a, b, imm8) \
  simde_mm512_shuffle_i32x4(a, b, ((imm8)&0xFF))

// And masked loads, which it lacks: only the lanes under the mask are read
// (as the hardware does), so that ASan sees what the native kernels touch.
#include <cstdint>
#include <cstring>

namespace ferry::avx512_emulation {

template <class Vec, class Lane, int kLanes, class Mask>
inline Vec MaskzLoadu(Mask k, const void* p) {
  Lane lanes[kLanes] = {};
  for (int i = 0; i < kLanes; ++i) {
    if ((k >> i) & 1) {
      std::memcpy(&lanes[i], static_cast<const char*>(p) + i * sizeof(Lane),
                  sizeof(Lane));
    }
  }
  Vec v;
  static_assert(sizeof(v) == sizeof(lanes));
  std::memcpy(&v, lanes, sizeof(v));
  return v;
}

template <class Lane, int kLanes, class Mask, class Vec>
inline void MaskStoreu(void* p, Mask k, Vec v) {
  for (int i = 0; i < kLanes; ++i) {
    if ((k >> i) & 1) {
      std::memcpy(static_cast<char*>(p) + i * sizeof(Lane),
                  reinterpret_cast<const char*>(&v) + i * sizeof(Lane),
                  sizeof(Lane));
    }
  }
}

// A 512-bit value from two 256-bit halves, and back.
template <class Vec512, class Vec256>
inline Vec512 Join(Vec256 lo, Vec256 hi) {
  const Vec256 halves[2] = {lo, hi};
  Vec512 v;
  static_assert(sizeof(v) == sizeof(halves));
  std::memcpy(&v, halves, sizeof(v));
  return v;
}
template <class Vec256, class Vec512>
inline Vec256 Half(Vec512 v, int h) {
  Vec256 half;
  std::memcpy(&half, reinterpret_cast<const char*>(&v) + 32 * h, 32);
  return half;
}

// What SIMDe lacks, 256 bits at a time with AVX2 and F16C (which the
// emulated build has).
inline simde__m512 CvtphPs(__m256i h) {
  return Join<simde__m512>(_mm256_cvtph_ps(_mm256_castsi256_si128(h)),
                           _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
}
inline simde__m512i Cvtepu16Epi32(__m256i h) {
  return Join<simde__m512i>(
      _mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)),
      _mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)));
}
inline simde__m512i CvtpsEpi32(simde__m512 v) {
  return Join<simde__m512i>(_mm256_cvtps_epi32(Half<__m256>(v, 0)),
                            _mm256_cvtps_epi32(Half<__m256>(v, 1)));
}
inline __m256 CvtpdPs(simde__m512d v) {
  return _mm256_set_m128(_mm256_cvtpd_ps(Half<__m256d>(v, 1)),
                         _mm256_cvtpd_ps(Half<__m256d>(v, 0)));
}
template <int kRounding>
inline __m256i CvtpsPh(simde__m512 v) {
  return _mm256_set_m128i(_mm256_cvtps_ph(Half<__m256>(v, 1), kRounding),
                          _mm256_cvtps_ph(Half<__m256>(v, 0), kRounding));
}
// The low 16 bits of the int32 lanes under k, stored as consecutive int16.
template <class Mask>
inline void MaskCvtepi32StoreuEpi16(void* p, Mask k, simde__m512i v) {
  int32_t lanes[16];
  std::memcpy(lanes, &v, sizeof(lanes));
  for (int i = 0; i < 16; ++i) {
    if ((k >> i) & 1) {
      const auto low = static_cast<int16_t>(lanes[i]);
      std::memcpy(static_cast<char*>(p) + 2 * i, &low, 2);
    }
  }
}
template <int kImm>
inline simde__m512 PermutePs(simde__m512 v) {
  return simde_mm512_shuffle_ps(v, v, kImm);
}
inline simde__m512 Cvtepi32Ps(simde__m512i v) {
  return Join<simde__m512>(_mm256_cvtepi32_ps(Half<__m256i>(v, 0)),
                           _mm256_cvtepi32_ps(Half<__m256i>(v, 1)));
}

}  // namespace ferry::avx512_emulation

#define _mm512_cvtph_ps(h) (::ferry::avx512_emulation::CvtphPs(h))
#define _mm512_cvtepu16_epi32(h) (::ferry::avx512_emulation::Cvtepu16Epi32(h))
#define _mm512_cvtepi32_ps(v) (::ferry::avx512_emulation::Cvtepi32Ps(v))
#define _mm512_cvtps_epi32(v) (::ferry::avx512_emulation::CvtpsEpi32(v))
#define _mm512_mask_srli_epi16(src, k, a, imm8) \
  simde_mm512_mask_mov_epi16(src, k, simde_mm512_srli_epi16(a, imm8))

#define _mm512_maskz_loadu_ps(k, p)                                         \
  (::ferry::avx512_emulation::MaskzLoadu<simde__m512, float, 16, uint32_t>( \
      (k), (p)))
#define _mm512_mask_storeu_ps(p, k, v) \
  (::ferry::avx512_emulation::MaskStoreu<float, 16, uint32_t>((p), (k), (v)))
#define _mm512_maskz_loadu_pd(k, p)                                          \
  (::ferry::avx512_emulation::MaskzLoadu<simde__m512d, double, 8, uint32_t>( \
      (k), (p)))
#define _mm512_maskz_loadu_epi32(k, p)                                         \
  (::ferry::avx512_emulation::MaskzLoadu<simde__m512i, int32_t, 16, uint32_t>( \
      (k), (p)))
#define _mm256_mask_storeu_ps(p, k, v) \
  (::ferry::avx512_emulation::MaskStoreu<float, 8, uint32_t>((p), (k), (v)))
#define _mm256_mask_storeu_epi16(p, k, v) \
  (::ferry::avx512_emulation::MaskStoreu<uint16_t, 16, uint32_t>((p), (k), (v)))
#define _mm512_mask_storeu_epi32(p, k, v) \
  (::ferry::avx512_emulation::MaskStoreu<int32_t, 16, uint32_t>((p), (k), (v)))
#define _mm512_mask_cvtepi32_storeu_epi16(p, k, v) \
  (::ferry::avx512_emulation::MaskCvtepi32StoreuEpi16((p), (k), (v)))
#define _mm512_permute_ps(v, imm8) \
  (::ferry::avx512_emulation::PermutePs<(imm8)>(v))
#define _mm512_cvtpd_ps(v) (::ferry::avx512_emulation::CvtpdPs(v))
#define _mm512_cvtps_ph(v, rounding) \
  (::ferry::avx512_emulation::CvtpsPh<(rounding)>(v))
#define _mm256_maskz_loadu_epi16(k, p)                               \
  (::ferry::avx512_emulation::MaskzLoadu<simde__m256i, uint16_t, 16, \
                                         uint32_t>((k), (p)))

#define FERRY_AVX512_BEGIN namespace emulated {
#define FERRY_AVX512_END }

#else

#include <immintrin.h>

#define FERRY_AVX512_BEGIN
#define FERRY_AVX512_END

#endif

#endif  // FERRY_BACKENDS_HOST_INTERNAL_AVX512_INTRINSICS_H_
