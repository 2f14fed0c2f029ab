#include "ferry/backends/cpu/kernels/internal/vec.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_kernels_internal {
namespace {

// exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 (Cody-Waite),
// exp(r) from Cephes' degree-5 polynomial.
constexpr float kExpLo = -87.3365447505531f;  // exp(kExpLo) = FLT_MIN.
constexpr float kExpHi = 88.7228391116729f;   // exp(kExpHi) = FLT_MAX.
// Upper clamp of ExpClamped: round(x log2 e) stays <= 127.
constexpr float kExpClampHi = 88.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kExpP0 = 1.9875691500e-4f;
constexpr float kExpP1 = 1.3981999507e-3f;
constexpr float kExpP2 = 8.3334519073e-3f;
constexpr float kExpP3 = 4.1665795894e-2f;
constexpr float kExpP4 = 1.6666665459e-1f;
constexpr float kExpP5 = 5.0000001201e-1f;

// sin/cos: x = j * pi/2 + y with |y| <= pi/4 (pi/2 split in three for an
// exact reduction), then Cephes' minimax polynomials on [-pi/4, pi/4].
constexpr float kTwoOverPi = 0.63661977236758134308f;
constexpr float kHalfPi1 = 1.5703125f;
constexpr float kHalfPi2 = 4.837512969970703125e-4f;
constexpr float kHalfPi3 = 7.54978995489188216e-8f;
constexpr float kSin1 = -1.6666654611e-1f;
constexpr float kSin2 = 8.3321608736e-3f;
constexpr float kSin3 = -1.9515295891e-4f;
constexpr float kCos1 = 4.166664568298827e-2f;
constexpr float kCos2 = -1.388731625493765e-3f;
constexpr float kCos3 = 2.443315711809948e-5f;

constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluCoef = 0.044715f;

bool force_portable = false;

bool DetectAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

float ApplyScalar(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      return a / b;
  }
  return 0.0f;
}

// e^x for x clamped into [kExpLo, kExpClampHi]: finite and nonzero
// everywhere, which is all x / (1 + e^-x) needs (the quotient saturates
// either way), so the activations skip FastExp's edge cases; the vector
// twin is ExpClampedAvx2.
float ExpClamped(float x) {
  // Written so that NaN stays NaN.
  if (x < kExpLo) x = kExpLo;
  if (x > kExpClampHi) x = kExpClampHi;
  return FastExp(x);
}

float SiluScalar(float x) { return x / (1.0f + ExpClamped(-x)); }

float GeluScalar(float x) {
  const float u = kSqrt2OverPi * x * (1.0f + kGeluCoef * x * x);
  return x / (1.0f + ExpClamped(-2.0f * u));
}

void SinCosScalar(float x, float* sin, float* cos) {
  const float j = std::nearbyint(x * kTwoOverPi);
  float y = std::fma(-j, kHalfPi1, x);
  y = std::fma(-j, kHalfPi2, y);
  y = std::fma(-j, kHalfPi3, y);
  const float z = y * y;
  const float sp =
      std::fma(y * z, std::fma(std::fma(kSin3, z, kSin2), z, kSin1), y);
  const float cp =
      std::fma(z * z, std::fma(std::fma(kCos3, z, kCos2), z, kCos1),
               std::fma(-0.5f, z, 1.0f));
  switch (static_cast<int>(j) & 3) {
    case 0:
      *sin = sp;
      *cos = cp;
      return;
    case 1:
      *sin = cp;
      *cos = -sp;
      return;
    case 2:
      *sin = -sp;
      *cos = -cp;
      return;
    default:
      *sin = -cp;
      *cos = sp;
      return;
  }
}

// ---------------------------------------------------------------------------
// Portable versions.

void BinaryRowPortable(BinaryOp op, const float* a, const float* b, float* dst,
                       int64_t n) {
  switch (op) {
    case BinaryOp::kAdd:
      for (int64_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
      return;
    case BinaryOp::kSub:
      for (int64_t i = 0; i < n; ++i) dst[i] = a[i] - b[i];
      return;
    case BinaryOp::kMul:
      for (int64_t i = 0; i < n; ++i) dst[i] = a[i] * b[i];
      return;
    case BinaryOp::kDiv:
      for (int64_t i = 0; i < n; ++i) dst[i] = a[i] / b[i];
      return;
  }
}

template <typename Src, typename Dst>
void ConvertLoop(const std::byte* src, int64_t src_stride, std::byte* dst,
                 int64_t dst_stride, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    Src s;
    std::memcpy(&s, src + i * src_stride, sizeof(s));
    float f;
    if constexpr (std::is_same_v<Src, float>) {
      f = s;
    } else if constexpr (std::is_same_v<Src, Half>) {
      f = F16ToF32(s);
    } else {
      f = BF16ToF32(s);
    }
    Dst d;
    if constexpr (std::is_same_v<Dst, float>) {
      d = f;
    } else if constexpr (std::is_same_v<Dst, Half>) {
      d = F32ToF16(f);
    } else {
      d = F32ToBF16(f);
    }
    std::memcpy(dst + i * dst_stride, &d, sizeof(d));
  }
}

template <typename Src>
void ConvertFrom(DType dst_type, const std::byte* src, int64_t src_stride,
                 std::byte* dst, int64_t dst_stride, int64_t n) {
  switch (dst_type) {
    case DType::kF32:
      return ConvertLoop<Src, float>(src, src_stride, dst, dst_stride, n);
    case DType::kF16:
      return ConvertLoop<Src, Half>(src, src_stride, dst, dst_stride, n);
    case DType::kBF16:
      return ConvertLoop<Src, BFloat16>(src, src_stride, dst, dst_stride, n);
    default:
      return;  // i32, block types: rejected by callers (CheckSupported).
  }
}

void ConvertStridedPortable(DType src_type, const std::byte* src,
                            int64_t src_stride, DType dst_type, std::byte* dst,
                            int64_t dst_stride, int64_t n) {
  if (src_type == dst_type) {
    const int64_t size = DTypeBlockBytes(src_type);
    if (src_stride == size && dst_stride == size) {
      std::memcpy(dst, src, static_cast<size_t>(n * size));
      return;
    }
    if (size == 4) {
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(dst + i * dst_stride, src + i * src_stride, 4);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(dst + i * dst_stride, src + i * src_stride,
                    static_cast<size_t>(size));
      }
    }
    return;
  }
  switch (src_type) {
    case DType::kF32:
      return ConvertFrom<float>(dst_type, src, src_stride, dst, dst_stride, n);
    case DType::kF16:
      return ConvertFrom<Half>(dst_type, src, src_stride, dst, dst_stride, n);
    case DType::kBF16:
      return ConvertFrom<BFloat16>(dst_type, src, src_stride, dst, dst_stride,
                                   n);
    default:
      return;  // i32, block types: rejected by callers (CheckSupported).
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// AVX2 + FMA + F16C versions. Everything up to the matching pop_options is
// compiled for that ISA and runs only when HasAvx2() is true; it includes no
// header, so no inline function of another file is built with these flags.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace {

inline __m256 Broadcast(float x) { return _mm256_set1_ps(x); }

inline __m256 ExpAvx2(__m256 x) {
  const __m256 too_small = _mm256_cmp_ps(x, Broadcast(kExpLo), _CMP_LT_OQ);
  const __m256 too_big = _mm256_cmp_ps(x, Broadcast(kExpHi), _CMP_GT_OQ);
  // min/max return their second operand when either is NaN: NaN stays.
  x = _mm256_min_ps(Broadcast(kExpHi), x);
  x = _mm256_max_ps(Broadcast(kExpLo), x);
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, Broadcast(kLog2e)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, Broadcast(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, Broadcast(kLn2Lo), r);
  __m256 p = Broadcast(kExpP0);
  p = _mm256_fmadd_ps(p, r, Broadcast(kExpP1));
  p = _mm256_fmadd_ps(p, r, Broadcast(kExpP2));
  p = _mm256_fmadd_ps(p, r, Broadcast(kExpP3));
  p = _mm256_fmadd_ps(p, r, Broadcast(kExpP4));
  p = _mm256_fmadd_ps(p, r, Broadcast(kExpP5));
  const __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, Broadcast(1.0f)));
  // n is in [-126, 128]: scale by 2^(n - s) * 2^s with s = (n > 0) so that
  // both factors are normal floats.
  const __m256 positive = _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_GT_OQ);
  const __m256 s = _mm256_and_ps(positive, Broadcast(1.0f));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_sub_ps(n, s)),
                       _mm256_set1_epi32(127)),
      23);
  p = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  p = _mm256_mul_ps(p, _mm256_add_ps(s, Broadcast(1.0f)));
  p = _mm256_andnot_ps(too_small, p);
  return _mm256_blendv_ps(p, Broadcast(std::numeric_limits<float>::infinity()),
                          too_big);
}

// ExpAvx2 for x clamped into [kExpLo, kExpClampHi] (ExpClamped's twin):
// with n in [-126, 127], 2^n is one exponent field and no edge needs a
// blend.
inline __m256 ExpClampedAvx2(__m256 x) {
  // min/max return their second operand when either is NaN: NaN stays.
  x = _mm256_min_ps(Broadcast(kExpClampHi), x);
  x = _mm256_max_ps(Broadcast(kExpLo), x);
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, Broadcast(kLog2e)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, Broadcast(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, Broadcast(kLn2Lo), r);
  __m256 p = Broadcast(kExpP0);
  p = _mm256_fmadd_ps(p, r, Broadcast(kExpP1));
  p = _mm256_fmadd_ps(p, r, Broadcast(kExpP2));
  p = _mm256_fmadd_ps(p, r, Broadcast(kExpP3));
  p = _mm256_fmadd_ps(p, r, Broadcast(kExpP4));
  p = _mm256_fmadd_ps(p, r, Broadcast(kExpP5));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r),
                      _mm256_add_ps(r, Broadcast(1.0f)));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

inline __m256 SiluAvx2(__m256 x) {
  const __m256 e = ExpClampedAvx2(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(Broadcast(1.0f), e));
}

inline __m256 GeluAvx2(__m256 x) {
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 inner =
      _mm256_fmadd_ps(Broadcast(kGeluCoef), x2, Broadcast(1.0f));
  const __m256 minus_2u =
      _mm256_mul_ps(_mm256_mul_ps(Broadcast(-2.0f * kSqrt2OverPi), x), inner);
  const __m256 e = ExpClampedAvx2(minus_2u);
  return _mm256_div_ps(x, _mm256_add_ps(Broadcast(1.0f), e));
}

void SinCosAvx2(const float* x, float* sin, float* cos, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 j =
        _mm256_round_ps(_mm256_mul_ps(v, Broadcast(kTwoOverPi)),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 y = _mm256_fnmadd_ps(j, Broadcast(kHalfPi1), v);
    y = _mm256_fnmadd_ps(j, Broadcast(kHalfPi2), y);
    y = _mm256_fnmadd_ps(j, Broadcast(kHalfPi3), y);
    const __m256 z = _mm256_mul_ps(y, y);
    __m256 sp = _mm256_fmadd_ps(Broadcast(kSin3), z, Broadcast(kSin2));
    sp = _mm256_fmadd_ps(sp, z, Broadcast(kSin1));
    sp = _mm256_fmadd_ps(_mm256_mul_ps(y, z), sp, y);
    __m256 cp = _mm256_fmadd_ps(Broadcast(kCos3), z, Broadcast(kCos2));
    cp = _mm256_fmadd_ps(cp, z, Broadcast(kCos1));
    cp = _mm256_fmadd_ps(_mm256_mul_ps(z, z), cp,
                         _mm256_fnmadd_ps(Broadcast(0.5f), z, Broadcast(1.0f)));
    // Quadrant q = j & 3: odd swaps sin and cos; q & 2 negates sin and
    // (q + 1) & 2 negates cos.
    const __m256i q = _mm256_cvtps_epi32(j);
    const __m256 swap = _mm256_castsi256_ps(_mm256_cmpeq_epi32(
        _mm256_and_si256(q, _mm256_set1_epi32(1)), _mm256_set1_epi32(1)));
    const __m256 sin_sign = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_and_si256(q, _mm256_set1_epi32(2)), 30));
    const __m256 cos_sign = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_and_si256(_mm256_add_epi32(q, _mm256_set1_epi32(1)),
                         _mm256_set1_epi32(2)),
        30));
    _mm256_storeu_ps(sin + i,
                     _mm256_xor_ps(_mm256_blendv_ps(sp, cp, swap), sin_sign));
    _mm256_storeu_ps(cos + i,
                     _mm256_xor_ps(_mm256_blendv_ps(cp, sp, swap), cos_sign));
  }
  for (; i < n; ++i) SinCosScalar(x[i], sin + i, cos + i);
}

void RopeNormalRowAvx2(const float* x, const float* cos2, const float* nsin2,
                       float* dst, int64_t n_dims) {
  int64_t i = 0;
  for (; i + 8 <= n_dims; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 swapped = _mm256_permute_ps(v, 0xb1);  // Pairs exchanged.
    _mm256_storeu_ps(
        dst + i,
        _mm256_fmadd_ps(v, _mm256_loadu_ps(cos2 + i),
                        _mm256_mul_ps(swapped, _mm256_loadu_ps(nsin2 + i))));
  }
  for (; i < n_dims; i += 2) {
    const float x0 = x[i];
    const float x1 = x[i + 1];
    dst[i] = x0 * cos2[i] + x1 * nsin2[i];
    dst[i + 1] = x1 * cos2[i + 1] + x0 * nsin2[i + 1];
  }
}

void RopeNeoxRowAvx2(const float* x, const float* cos, const float* sin,
                     float* dst, int64_t half) {
  int64_t k = 0;
  for (; k + 8 <= half; k += 8) {
    const __m256 x0 = _mm256_loadu_ps(x + k);
    const __m256 x1 = _mm256_loadu_ps(x + k + half);
    const __m256 c = _mm256_loadu_ps(cos + k);
    const __m256 s = _mm256_loadu_ps(sin + k);
    _mm256_storeu_ps(dst + k, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
    _mm256_storeu_ps(dst + k + half,
                     _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
  }
  for (; k < half; ++k) {
    const float x0 = x[k];
    const float x1 = x[k + half];
    dst[k] = x0 * cos[k] - x1 * sin[k];
    dst[k + half] = x0 * sin[k] + x1 * cos[k];
  }
}

inline float HorizontalSum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

inline float HorizontalMax(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_max_ps(lo, hi);
  lo = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_max_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// Element functions for MapAvx2 (structs, not lambdas: a lambda's function
// pointer thunk would not get this region's target).
struct AffineFn {
  __m256 sub;
  __m256 mul;
  __m256 operator()(__m256 v) const {
    return _mm256_mul_ps(_mm256_sub_ps(v, sub), mul);
  }
};
struct SiluFn {
  __m256 operator()(__m256 v) const { return SiluAvx2(v); }
};
struct GeluFn {
  __m256 operator()(__m256 v) const { return GeluAvx2(v); }
};
struct ReluFn {
  __m256 operator()(__m256 v) const {
    return _mm256_max_ps(_mm256_setzero_ps(), v);
  }
};

// Applies f to every element; the tail goes through f too (padded with
// `pad`), so that an element's result does not depend on where the row was
// split between threads.
template <typename F>
inline void MapAvx2(const float* x, float* dst, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, f(_mm256_loadu_ps(x + i)));
  }
  if (i < n) {
    alignas(32) float tail[8] = {};
    const size_t rest = static_cast<size_t>(n - i);
    std::memcpy(tail, x + i, rest * sizeof(float));
    _mm256_store_ps(tail, f(_mm256_load_ps(tail)));
    std::memcpy(dst + i, tail, rest * sizeof(float));
  }
}

template <BinaryOp kOp>
inline __m256 ApplyAvx2(__m256 a, __m256 b) {
  if constexpr (kOp == BinaryOp::kAdd) return _mm256_add_ps(a, b);
  if constexpr (kOp == BinaryOp::kSub) return _mm256_sub_ps(a, b);
  if constexpr (kOp == BinaryOp::kMul) return _mm256_mul_ps(a, b);
  return _mm256_div_ps(a, b);
}

template <BinaryOp kOp>
void BinaryRowAvx2T(const float* a, const float* b, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 r0 =
        ApplyAvx2<kOp>(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    const __m256 r1 =
        ApplyAvx2<kOp>(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
    _mm256_storeu_ps(dst + i, r0);
    _mm256_storeu_ps(dst + i + 8, r1);
  }
  for (; i < n; ++i) dst[i] = ApplyScalar(kOp, a[i], b[i]);
}

template <BinaryOp kOp>
void BinaryRowScalarAvx2T(const float* a, float b, float* dst, int64_t n) {
  const __m256 vb = Broadcast(b);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, ApplyAvx2<kOp>(_mm256_loadu_ps(a + i), vb));
  }
  for (; i < n; ++i) dst[i] = ApplyScalar(kOp, a[i], b);
}

void BinaryRowAvx2(BinaryOp op, const float* a, const float* b, float* dst,
                   int64_t n) {
  switch (op) {
    case BinaryOp::kAdd:
      return BinaryRowAvx2T<BinaryOp::kAdd>(a, b, dst, n);
    case BinaryOp::kSub:
      return BinaryRowAvx2T<BinaryOp::kSub>(a, b, dst, n);
    case BinaryOp::kMul:
      return BinaryRowAvx2T<BinaryOp::kMul>(a, b, dst, n);
    case BinaryOp::kDiv:
      return BinaryRowAvx2T<BinaryOp::kDiv>(a, b, dst, n);
  }
}

void BinaryRowScalarAvx2(BinaryOp op, const float* a, float b, float* dst,
                         int64_t n) {
  switch (op) {
    case BinaryOp::kAdd:
      return BinaryRowScalarAvx2T<BinaryOp::kAdd>(a, b, dst, n);
    case BinaryOp::kSub:
      return BinaryRowScalarAvx2T<BinaryOp::kSub>(a, b, dst, n);
    case BinaryOp::kMul:
      return BinaryRowScalarAvx2T<BinaryOp::kMul>(a, b, dst, n);
    case BinaryOp::kDiv:
      return BinaryRowScalarAvx2T<BinaryOp::kDiv>(a, b, dst, n);
  }
}

void AffineRowAvx2(const float* x, float sub, float mul, float* dst,
                   int64_t n) {
  MapAvx2(x, dst, n, AffineFn{Broadcast(sub), Broadcast(mul)});
}

void SiluRowAvx2(const float* x, float* dst, int64_t n) {
  MapAvx2(x, dst, n, SiluFn{});
}

void GeluRowAvx2(const float* x, float* dst, int64_t n) {
  MapAvx2(x, dst, n, GeluFn{});
}

void ReluRowAvx2(const float* x, float* dst, int64_t n) {
  // max(0, x) returns x for NaN, like the scalar x > 0 ? x : 0 does not;
  // either is acceptable for NaN input.
  MapAvx2(x, dst, n, ReluFn{});
}

float SumSquaresRowAvx2(const float* x, float center, int64_t n) {
  const __m256 c = Broadcast(center);
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), c);
    const __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), c);
    acc0 = _mm256_fmadd_ps(d0, d0, acc0);
    acc1 = _mm256_fmadd_ps(d1, d1, acc1);
  }
  float sum = HorizontalSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += (x[i] - center) * (x[i] - center);
  return sum;
}

float SumRowAvx2(const float* x, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_add_ps(acc0, _mm256_loadu_ps(x + i));
    acc1 = _mm256_add_ps(acc1, _mm256_loadu_ps(x + i + 8));
  }
  float sum = HorizontalSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += x[i];
  return sum;
}

float ScaleMaskMaxRowAvx2(const float* x, const float* mask, float scale,
                          float* dst, int64_t n) {
  const __m256 vs = Broadcast(scale);
  __m256 vmax = Broadcast(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  if (mask != nullptr) {
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), vs,
                                       _mm256_loadu_ps(mask + i));
      _mm256_storeu_ps(dst + i, v);
      vmax = _mm256_max_ps(vmax, v);
    }
  } else {
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
      _mm256_storeu_ps(dst + i, v);
      vmax = _mm256_max_ps(vmax, v);
    }
  }
  float max = HorizontalMax(vmax);
  for (; i < n; ++i) {
    const float v =
        mask != nullptr ? std::fma(x[i], scale, mask[i]) : x[i] * scale;
    dst[i] = v;
    max = std::max(max, v);
  }
  return max;
}

float ExpSubRowAvx2(float* x, float max, int64_t n) {
  const __m256 vmax = Broadcast(max);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = ExpAvx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {
    alignas(32) float tail[8];
    std::fill(std::begin(tail), std::end(tail),
              -std::numeric_limits<float>::infinity());
    const size_t rest = static_cast<size_t>(n - i);
    std::memcpy(tail, x + i, rest * sizeof(float));
    const __m256 e = ExpAvx2(_mm256_sub_ps(_mm256_load_ps(tail), vmax));
    // Padding lanes give exp(-inf) = 0 unless max is -inf (NaN); mask them.
    alignas(32) int32_t lane_mask[8];
    for (int k = 0; k < 8; ++k)
      lane_mask[k] = k < static_cast<int>(rest) ? -1 : 0;
    const __m256 keep =
        _mm256_castsi256_ps(_mm256_load_si256((const __m256i*)lane_mask));
    const __m256 masked = _mm256_and_ps(e, keep);
    _mm256_store_ps(tail, masked);
    std::memcpy(x + i, tail, rest * sizeof(float));
    acc = _mm256_add_ps(acc, masked);
  }
  return HorizontalSum(acc);
}

// Contiguous conversions between float types; the tails use the scalar
// dtype.h conversions, which round identically.
bool ConvertRowAvx2(DType src_type, const void* src_v, DType dst_type,
                    void* dst_v, int64_t n) {
  const auto* src = static_cast<const std::byte*>(src_v);
  auto* dst = static_cast<std::byte*>(dst_v);
  int64_t i = 0;
  if (src_type == DType::kF16 && dst_type == DType::kF32) {
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128((const __m128i*)(src + 2 * i));
      _mm256_storeu_ps((float*)(dst + 4 * i), _mm256_cvtph_ps(h));
    }
  } else if (src_type == DType::kBF16 && dst_type == DType::kF32) {
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128((const __m128i*)(src + 2 * i));
      const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
      _mm256_storeu_si256((__m256i*)(dst + 4 * i), w);
    }
  } else if (src_type == DType::kF32 && dst_type == DType::kF16) {
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps((const float*)(src + 4 * i));
      _mm_storeu_si128(
          (__m128i*)(dst + 2 * i),
          _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  } else if (src_type == DType::kF32 && dst_type == DType::kBF16) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    const __m256i bias = _mm256_set1_epi32(0x7fff);
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    for (; i + 8 <= n; i += 8) {
      const __m256i x = _mm256_loadu_si256((const __m256i*)(src + 4 * i));
      const __m256i is_nan =
          _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
      const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
      const __m256i rounded = _mm256_srli_epi32(
          _mm256_add_epi32(x, _mm256_add_epi32(bias, odd)), 16);
      const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), quiet);
      const __m256i r = _mm256_blendv_epi8(rounded, nan, is_nan);
      const __m256i packed =
          _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
      _mm_storeu_si128((__m128i*)(dst + 2 * i), _mm256_castsi256_si128(packed));
    }
  } else {
    return false;
  }
  if (i < n) {
    ConvertStridedPortable(src_type, src + i * DTypeBlockBytes(src_type),
                           DTypeBlockBytes(src_type), dst_type,
                           dst + i * DTypeBlockBytes(dst_type),
                           DTypeBlockBytes(dst_type), n - i);
  }
  return true;
}

}  // namespace

#pragma GCC pop_options

// ---------------------------------------------------------------------------
// Dispatch.

bool HasAvx2() {
  static const bool has = DetectAvx2();
  return has && !force_portable;
}

void ForcePortableForTesting(bool force) { force_portable = force; }

float FastExp(float x) {
  if (std::isnan(x)) return x;
  if (x < kExpLo) return 0.0f;
  if (x > kExpHi) return std::numeric_limits<float>::infinity();
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(-n, kLn2Hi, x);
  r = std::fma(-n, kLn2Lo, r);
  float p = kExpP0;
  p = std::fma(p, r, kExpP1);
  p = std::fma(p, r, kExpP2);
  p = std::fma(p, r, kExpP3);
  p = std::fma(p, r, kExpP4);
  p = std::fma(p, r, kExpP5);
  p = std::fma(p, r * r, r + 1.0f);
  const int s = n > 0 ? 1 : 0;
  const int e = static_cast<int>(n) - s;
  p *= std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
  return s ? p * 2.0f : p;
}

void SinCosRow(const float* x, float* sin, float* cos, int64_t n) {
  if (HasAvx2()) return SinCosAvx2(x, sin, cos, n);
  for (int64_t i = 0; i < n; ++i) SinCosScalar(x[i], sin + i, cos + i);
}

void RopeNormalRow(const float* x, const float* cos2, const float* nsin2,
                   float* dst, int64_t n_dims) {
  if (HasAvx2()) return RopeNormalRowAvx2(x, cos2, nsin2, dst, n_dims);
  for (int64_t i = 0; i < n_dims; i += 2) {
    const float x0 = x[i];
    const float x1 = x[i + 1];
    dst[i] = x0 * cos2[i] + x1 * nsin2[i];
    dst[i + 1] = x1 * cos2[i + 1] + x0 * nsin2[i + 1];
  }
}

void RopeNeoxRow(const float* x, const float* cos, const float* sin, float* dst,
                 int64_t half) {
  if (HasAvx2()) return RopeNeoxRowAvx2(x, cos, sin, dst, half);
  for (int64_t k = 0; k < half; ++k) {
    const float x0 = x[k];
    const float x1 = x[k + half];
    dst[k] = x0 * cos[k] - x1 * sin[k];
    dst[k + half] = x0 * sin[k] + x1 * cos[k];
  }
}

void BinaryRow(BinaryOp op, const float* a, const float* b, float* dst,
               int64_t n) {
  if (HasAvx2()) return BinaryRowAvx2(op, a, b, dst, n);
  BinaryRowPortable(op, a, b, dst, n);
}

void BinaryRowScalar(BinaryOp op, const float* a, float b, float* dst,
                     int64_t n) {
  if (HasAvx2()) return BinaryRowScalarAvx2(op, a, b, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = ApplyScalar(op, a[i], b);
}

void ScaleRow(const float* x, float s, float* dst, int64_t n) {
  BinaryRowScalar(BinaryOp::kMul, x, s, dst, n);
}

void AffineRow(const float* x, float sub, float mul, float* dst, int64_t n) {
  if (HasAvx2()) return AffineRowAvx2(x, sub, mul, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = (x[i] - sub) * mul;
}

void SiluRow(const float* x, float* dst, int64_t n) {
  if (HasAvx2()) return SiluRowAvx2(x, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = SiluScalar(x[i]);
}

void GeluRow(const float* x, float* dst, int64_t n) {
  if (HasAvx2()) return GeluRowAvx2(x, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = GeluScalar(x[i]);
}

void ReluRow(const float* x, float* dst, int64_t n) {
  if (HasAvx2()) return ReluRowAvx2(x, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

float SumRow(const float* x, int64_t n) {
  if (HasAvx2()) return SumRowAvx2(x, n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  return static_cast<float>(sum);
}

float SumSquaresRow(const float* x, float center, int64_t n) {
  if (HasAvx2()) return SumSquaresRowAvx2(x, center, n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - center;
    sum += d * d;
  }
  return static_cast<float>(sum);
}

float ScaleMaskMaxRow(const float* x, const float* mask, float scale,
                      float* dst, int64_t n) {
  if (HasAvx2()) return ScaleMaskMaxRowAvx2(x, mask, scale, dst, n);
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    const float v =
        mask != nullptr ? std::fma(x[i], scale, mask[i]) : x[i] * scale;
    dst[i] = v;
    max = std::max(max, v);
  }
  return max;
}

float ExpSubRow(float* x, float max, int64_t n) {
  if (HasAvx2()) return ExpSubRowAvx2(x, max, n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = FastExp(x[i] - max);
    sum += x[i];
  }
  return static_cast<float>(sum);
}

void ConvertRow(DType src_type, const void* src, DType dst_type, void* dst,
                int64_t n) {
  if (n <= 0) return;
  if (HasAvx2() && ConvertRowAvx2(src_type, src, dst_type, dst, n)) return;
  ConvertStridedPortable(
      src_type, static_cast<const std::byte*>(src), DTypeBlockBytes(src_type),
      dst_type, static_cast<std::byte*>(dst), DTypeBlockBytes(dst_type), n);
}

void ConvertStrided(DType src_type, const void* src, int64_t src_stride,
                    DType dst_type, void* dst, int64_t dst_stride, int64_t n) {
  if (n <= 0) return;
  if (src_stride == DTypeBlockBytes(src_type) &&
      dst_stride == DTypeBlockBytes(dst_type)) {
    return ConvertRow(src_type, src, dst_type, dst, n);
  }
  ConvertStridedPortable(src_type, static_cast<const std::byte*>(src),
                         src_stride, dst_type, static_cast<std::byte*>(dst),
                         dst_stride, n);
}

}  // namespace cpu_kernels_internal
}  // namespace ferry
