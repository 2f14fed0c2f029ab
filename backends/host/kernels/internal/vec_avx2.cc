// AVX2 + FMA + F16C row primitives (vec_isa.h); this file alone is compiled
// with those flags and runs only where the CPU has them. Tails shorter than a
// vector go through the portable table, or through the vector code padded.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "ferry/backends/host/kernels/internal/vec_isa.h"
#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_kernels_internal {
namespace {

using namespace vec_constants;  // NOLINT(build/namespaces)

inline __m256 Broadcast(float x) { return _mm256_set1_ps(x); }

// Cephes' polynomial for exp(r), |r| <= ln(2) / 2, and n = round(x log2 e).
inline __m256 ExpPolyAvx2(__m256 x, __m256* n_out) {
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
  *n_out = n;
  return _mm256_fmadd_ps(p, _mm256_mul_ps(r, r),
                         _mm256_add_ps(r, Broadcast(1.0f)));
}

inline __m256 ExpAvx2(__m256 x) {
  const __m256 too_small = _mm256_cmp_ps(x, Broadcast(kExpLo), _CMP_LT_OQ);
  const __m256 too_big = _mm256_cmp_ps(x, Broadcast(kExpHi), _CMP_GT_OQ);
  // min/max return their second operand when either is NaN: NaN stays.
  x = _mm256_min_ps(Broadcast(kExpHi), x);
  x = _mm256_max_ps(Broadcast(kExpLo), x);
  __m256 n;
  __m256 p = ExpPolyAvx2(x, &n);
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
  __m256 n;
  const __m256 p = ExpPolyAvx2(x, &n);
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// exp(-x) for silu as 2^t, t = -x log2(e) clamped like ExpClampedAvx2's
// argument (so n stays in [-126, 127]): 2^(t - n) by its polynomial
// (kExp2C*) times 2^n built in the exponent bits. Fewer multiplies than the
// reduction by ln 2 in two steps, which bounds silu's throughput.
inline __m256 ExpNegForSiluAvx2(__m256 x) {
  __m256 t = _mm256_mul_ps(x, Broadcast(-kLog2e));
  // min/max return their second operand when either is NaN: NaN stays.
  t = _mm256_min_ps(Broadcast(kExpClampHi * kLog2e), t);
  t = _mm256_max_ps(Broadcast(kExpLo * kLog2e), t);
  const __m256 n =
      _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(t, n);
  __m256 p = Broadcast(kExp2C6);
  p = _mm256_fmadd_ps(p, f, Broadcast(kExp2C5));
  p = _mm256_fmadd_ps(p, f, Broadcast(kExp2C4));
  p = _mm256_fmadd_ps(p, f, Broadcast(kExp2C3));
  p = _mm256_fmadd_ps(p, f, Broadcast(kExp2C2));
  p = _mm256_fmadd_ps(p, f, Broadcast(kExp2C1));
  p = _mm256_fmadd_ps(p, f, Broadcast(1.0f));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

inline __m256 SiluAvx2(__m256 x) {
  return _mm256_div_ps(x, _mm256_add_ps(Broadcast(1.0f), ExpNegForSiluAvx2(x)));
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
  PortableKernels().sin_cos_row(x + i, sin + i, cos + i, n - i);
}

// Angles of one token, reduced modulo 2 pi in double (a position times a
// frequency can be large), four at a time.
void RopeAnglesRowAvx2(double position, const double* theta, float* angle,
                       int64_t n) {
  const __m256d p = _mm256_set1_pd(position);
  const __m256d two_pi = _mm256_set1_pd(kTwoPi);
  const __m256d inv_two_pi = _mm256_set1_pd(kInvTwoPi);
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    const __m256d a = _mm256_mul_pd(p, _mm256_loadu_pd(theta + k));
    const __m256d turns =
        _mm256_round_pd(_mm256_mul_pd(a, inv_two_pi),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_ps(angle + k, _mm256_cvtpd_ps(_mm256_sub_pd(
                                 a, _mm256_mul_pd(two_pi, turns))));
  }
  PortableKernels().rope_angles_row(position, theta + k, angle + k, n - k);
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
  PortableKernels().rope_normal_row(x + i, cos2 + i, nsin2 + i, dst + i,
                                    n_dims - i);
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
// max returns its second operand when either is NaN: NaN gives 0, as the
// portable x > 0 ? x : 0 does.
struct ReluFn {
  __m256 operator()(__m256 v) const {
    return _mm256_max_ps(v, _mm256_setzero_ps());
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
  PortableKernels().binary_row(kOp, a + i, b + i, dst + i, n - i);
}

template <BinaryOp kOp>
void BinaryRowScalarAvx2T(const float* a, float b, float* dst, int64_t n) {
  const __m256 vb = Broadcast(b);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, ApplyAvx2<kOp>(_mm256_loadu_ps(a + i), vb));
  }
  PortableKernels().binary_row_scalar(kOp, a + i, b, dst + i, n - i);
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

float DotRowAvx2(const float* x, const float* y, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 =
        _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8),
                           _mm256_loadu_ps(y + i + 8), acc1);
  }
  float sum = HorizontalSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

void AxpyRowAvx2(float a, const float* x, float* y, int64_t n) {
  const __m256 va = Broadcast(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i),
                                            _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

// 8 halves at p widened to floats.
inline __m256 LoadHalves(const Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// 8 elements of a row as floats.
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const Half* p) { return LoadHalves(p); }
inline float Widen(float v) { return v; }
inline float Widen(Half v) { return F16ToF32(v); }

// Lane j = the sum of acc[j]'s lanes.
inline __m256 SumEach(const __m256 acc[8]) {
  // Per 128-bit half: [s(acc0) s(acc1) s(acc2) s(acc3)] over that half.
  const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]),
                                      _mm256_hadd_ps(acc[2], acc[3]));
  const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]),
                                      _mm256_hadd_ps(acc[6], acc[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                       _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// Rows of whole vectors go eight at a time: eight accumulators whose sums
// come out as one vector (a key row of a 64-wide head is 8 FMAs, so a
// per-row reduction would cost as much as the row). The rest row by row.
template <typename Row>
void DotRowsOf(const float* x, const Row* rows, int64_t stride, int64_t n_rows,
               int64_t n, float scale, float* out) {
  const int64_t n8 = n / 8 * 8;
  int64_t r = 0;
  if (n8 == n) {
    const __m256 vscale = Broadcast(scale);
    for (; r + 8 <= n_rows; r += 8) {
      const Row* r0 = rows + r * stride;
      __m256 acc[8];
      for (__m256& a : acc) a = _mm256_setzero_ps();
      for (int64_t i = 0; i < n; i += 8) {
        const __m256 xv = _mm256_loadu_ps(x + i);
        for (int q = 0; q < 8; ++q) {
          acc[q] = _mm256_fmadd_ps(xv, Load8(r0 + q * stride + i), acc[q]);
        }
      }
      _mm256_storeu_ps(out + r, _mm256_mul_ps(vscale, SumEach(acc)));
    }
  }
  for (; r < n_rows; ++r) {
    const Row* row = rows + r * stride;
    __m256 acc0 = _mm256_setzero_ps();
    __m256 acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n8; i += 16) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), Load8(row + i), acc0);
      acc1 =
          _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), Load8(row + i + 8), acc1);
    }
    if (i < n8) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), Load8(row + i), acc0);
    }
    float sum = HorizontalSum(_mm256_add_ps(acc0, acc1));
    for (i = n8; i < n; ++i) sum += x[i] * Widen(row[i]);
    out[r] = scale * sum;
  }
}

void DotRowsAvx2(const float* x, const float* rows, int64_t stride,
                 int64_t n_rows, int64_t n, float scale, float* out) {
  DotRowsOf(x, rows, stride, n_rows, n, scale, out);
}

void DotRowsF16Avx2(const float* x, const Half* rows, int64_t stride,
                    int64_t n_rows, int64_t n, float scale, float* out) {
  DotRowsOf(x, rows, stride, n_rows, n, scale, out);
}

// y[i, i + 8 * kVectors) held in registers while every row adds into it.
template <int kVectors, typename Row>
void AxpyChunk(const float* a, const Row* rows, int64_t stride, int64_t n_rows,
               int64_t i, float* y) {
  __m256 acc[kVectors];
  for (int q = 0; q < kVectors; ++q) acc[q] = _mm256_loadu_ps(y + i + 8 * q);
  for (int64_t r = 0; r < n_rows; ++r) {
    const __m256 w = Broadcast(a[r]);
    const Row* row = rows + r * stride + i;
    for (int q = 0; q < kVectors; ++q) {
      acc[q] = _mm256_fmadd_ps(w, Load8(row + 8 * q), acc[q]);
    }
  }
  for (int q = 0; q < kVectors; ++q) _mm256_storeu_ps(y + i + 8 * q, acc[q]);
}

// y in chunks of 64 floats (a 64-wide head at once: eight chains of FMAs
// hide their latency, where four waited on it), then 32, then 8, then
// single elements.
template <typename Row>
void AxpyRowsOf(const float* a, const Row* rows, int64_t stride, int64_t n_rows,
                int64_t n, float* y) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) AxpyChunk<8>(a, rows, stride, n_rows, i, y);
  for (; i + 32 <= n; i += 32) AxpyChunk<4>(a, rows, stride, n_rows, i, y);
  for (; i + 8 <= n; i += 8) {
    __m256 acc = _mm256_loadu_ps(y + i);
    for (int64_t r = 0; r < n_rows; ++r) {
      acc = _mm256_fmadd_ps(Broadcast(a[r]), Load8(rows + r * stride + i), acc);
    }
    _mm256_storeu_ps(y + i, acc);
  }
  for (; i < n; ++i) {
    float sum = y[i];
    for (int64_t r = 0; r < n_rows; ++r) {
      sum += a[r] * Widen(rows[r * stride + i]);
    }
    y[i] = sum;
  }
}

void AxpyRowsAvx2(const float* a, const float* rows, int64_t stride,
                  int64_t n_rows, int64_t n, float* y) {
  AxpyRowsOf(a, rows, stride, n_rows, n, y);
}

void AxpyRowsF16Avx2(const float* a, const Half* rows, int64_t stride,
                     int64_t n_rows, int64_t n, float* y) {
  AxpyRowsOf(a, rows, stride, n_rows, n, y);
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
  const float max = HorizontalMax(vmax);
  if (i == n) return max;
  const float tail_max = PortableKernels().scale_mask_max_row(
      x + i, mask != nullptr ? mask + i : nullptr, scale, dst + i, n - i);
  return tail_max > max ? tail_max : max;
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
    for (float& t : tail) t = -std::numeric_limits<float>::infinity();
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

const VecKernels& Avx2Kernels() {
  static constexpr VecKernels kKernels = {
      .binary_row = BinaryRowAvx2,
      .binary_row_scalar = BinaryRowScalarAvx2,
      .affine_row = AffineRowAvx2,
      .silu_row = SiluRowAvx2,
      .gelu_row = GeluRowAvx2,
      .relu_row = ReluRowAvx2,
      .sum_row = SumRowAvx2,
      .sum_squares_row = SumSquaresRowAvx2,
      .dot_row = DotRowAvx2,
      .axpy_row = AxpyRowAvx2,
      .dot_rows = DotRowsAvx2,
      .axpy_rows = AxpyRowsAvx2,
      .dot_rows_f16 = DotRowsF16Avx2,
      .axpy_rows_f16 = AxpyRowsF16Avx2,
      .scale_mask_max_row = ScaleMaskMaxRowAvx2,
      .exp_sub_row = ExpSubRowAvx2,
      .sin_cos_row = SinCosAvx2,
      .rope_angles_row = RopeAnglesRowAvx2,
      .rope_normal_row = RopeNormalRowAvx2,
      .rope_neox_row = RopeNeoxRowAvx2,
      .convert_row = ConvertRowAvx2,
  };
  return kKernels;
}

}  // namespace cpu_kernels_internal
}  // namespace ferry
