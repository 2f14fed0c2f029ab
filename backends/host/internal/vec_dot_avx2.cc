// AVX2 vec_dot kernels (compiled with -mavx2 -mfma -mf16c). Integer block
// products use the sign trick: maddubs multiplies unsigned by signed bytes,
// so |w| is dotted with sign(w) * a. `a` (our own q8 quantizer's output) is
// never -128, so negating it cannot overflow; |w| may be 128, read unsigned.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "ferry/backends/host/internal/avx2_blocks.h"
#include "ferry/backends/host/internal/vec_dot_kernels.h"
#include "ferry/quant/block_formats.h"

namespace ferry::quant::quant_internal {
namespace {

using host_avx2::DotSigned;
using host_avx2::DotUnsigned;
using host_avx2::Half;
using host_avx2::HorizontalSum;
using host_avx2::Load32;
using host_avx2::Nibbles;

// The fifth bits of a q5 block as 0x10 in each byte whose element has it:
// byte i takes byte i / 8 of qh, then tests bit i % 8.
inline __m256i FifthBits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                         0x0202020202020202, 0x0303030303030303));
  const __m256i bit =
      _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

float DotQ4_0Q8_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  __m256 acc = _mm256_setzero_ps();
  const __m256i eight = _mm256_set1_epi8(8);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i q = _mm256_sub_epi8(Nibbles(x[b].qs), eight);
    const __m256 p = _mm256_cvtepi32_ps(DotSigned(q, Load32(y[b].qs)));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(Half(x[b].d) * Half(y[b].d)), p, acc);
  }
  return HorizontalSum(acc);
}

float DotQ4_1Q8_1(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(act);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256 p =
        _mm256_cvtepi32_ps(DotUnsigned(Nibbles(x[b].qs), Load32(y[b].qs)));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(Half(x[b].d) * Half(y[b].d)), p, acc);
    mins += Half(x[b].m) * Half(y[b].s);
  }
  return HorizontalSum(acc) + mins;
}

float DotQ5_0Q8_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  __m256 acc = _mm256_setzero_ps();
  const __m256i sixteen = _mm256_set1_epi8(16);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i q = _mm256_sub_epi8(
        _mm256_or_si256(Nibbles(x[b].qs), FifthBits(x[b].qh)), sixteen);
    const __m256 p = _mm256_cvtepi32_ps(DotSigned(q, Load32(y[b].qs)));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(Half(x[b].d) * Half(y[b].d)), p, acc);
  }
  return HorizontalSum(acc);
}

float DotQ5_1Q8_1(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(act);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i q = _mm256_or_si256(Nibbles(x[b].qs), FifthBits(x[b].qh));
    const __m256 p = _mm256_cvtepi32_ps(DotUnsigned(q, Load32(y[b].qs)));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(Half(x[b].d) * Half(y[b].d)), p, acc);
    mins += Half(x[b].m) * Half(y[b].s);
  }
  return HorizontalSum(acc) + mins;
}

float DotQ8_0Q8_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256 p =
        _mm256_cvtepi32_ps(DotSigned(Load32(x[b].qs), Load32(y[b].qs)));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(Half(x[b].d) * Half(y[b].d)), p, acc);
  }
  return HorizontalSum(acc);
}

// Float weights: `Load8` widens 8 weights at `w + i` to f32.
template <__m256 (*Load8)(const void*, int64_t),
          float (*Scalar)(const void*, int64_t)>
float DotFloat(const void* w, const void* act, int64_t n) {
  const auto* y = static_cast<const float*>(act);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(Load8(w, i), _mm256_loadu_ps(y + i), acc0);
    acc1 = _mm256_fmadd_ps(Load8(w, i + 8), _mm256_loadu_ps(y + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(Load8(w, i), _mm256_loadu_ps(y + i), acc0);
  }
  float sum = HorizontalSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += Scalar(w, i) * y[i];
  return sum;
}

__m256 LoadF32(const void* w, int64_t i) {
  return _mm256_loadu_ps(static_cast<const float*>(w) + i);
}
__m256 LoadF16(const void* w, int64_t i) {
  return _mm256_cvtph_ps(_mm_loadu_si128(
      reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i)));
}
__m256 LoadBF16(const void* w, int64_t i) {
  const __m128i h = _mm_loadu_si128(
      reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
float OneF32(const void* w, int64_t i) {
  return static_cast<const float*>(w)[i];
}
float OneF16(const void* w, int64_t i) {
  return _cvtsh_ss(static_cast<const uint16_t*>(w)[i]);
}
float OneBF16(const void* w, int64_t i) {
  return __builtin_bit_cast(
      float, static_cast<uint32_t>(static_cast<const uint16_t*>(w)[i]) << 16);
}

}  // namespace

VecDotFn Avx2VecDot(QuantType weight) {
  switch (weight) {
    case QuantType::kQ4_0:
      return DotQ4_0Q8_0;
    case QuantType::kQ4_1:
      return DotQ4_1Q8_1;
    case QuantType::kQ5_0:
      return DotQ5_0Q8_0;
    case QuantType::kQ5_1:
      return DotQ5_1Q8_1;
    case QuantType::kQ8_0:
      return DotQ8_0Q8_0;
    case QuantType::kF32:
      return DotFloat<LoadF32, OneF32>;
    case QuantType::kF16:
      return DotFloat<LoadF16, OneF16>;
    case QuantType::kBF16:
      return DotFloat<LoadBF16, OneBF16>;
    default:
      return Avx2VecDotK(weight);
  }
}

}  // namespace ferry::quant::quant_internal
