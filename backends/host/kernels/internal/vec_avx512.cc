// AVX-512 row primitives (vec_isa.h; needs avx512f/bw/vl, fma and f16c):
// this file alone is compiled with those flags and runs only where the CPU
// has them (and for tests also on SIMDe: avx512_intrinsics.h). Every tail is
// one masked vector, so an element's result does not depend on where a row was
// cut. GCC 12's AVX-512 intrinsics self-initialise their "undefined" operands
// and then warn about it wherever they are inlined (GCC PR105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cstddef>
#include <cstdint>
#include <limits>

#include "ferry/backends/host/internal/avx512_intrinsics.h"
#include "ferry/backends/host/kernels/internal/vec_isa.h"
#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_kernels_internal {
FERRY_AVX512_BEGIN
namespace {

using namespace vec_constants;  // NOLINT(build/namespaces)

constexpr int64_t kLanes = 16;

inline __m512 Bc(float x) { return _mm512_set1_ps(x); }

// Lanes [0, n) for 0 <= n <= 16.
inline __mmask16 FirstLanes(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1);
}

inline __m512 RoundToInt(__m512 x) {
  return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// Cephes' polynomial for exp(r), |r| <= ln(2) / 2, and n = round(x log2 e).
inline __m512 ExpPoly(__m512 x, __m512* n_out) {
  const __m512 n = RoundToInt(_mm512_mul_ps(x, Bc(kLog2e)));
  __m512 r = _mm512_fnmadd_ps(n, Bc(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, Bc(kLn2Lo), r);
  __m512 p = Bc(kExpP0);
  p = _mm512_fmadd_ps(p, r, Bc(kExpP1));
  p = _mm512_fmadd_ps(p, r, Bc(kExpP2));
  p = _mm512_fmadd_ps(p, r, Bc(kExpP3));
  p = _mm512_fmadd_ps(p, r, Bc(kExpP4));
  p = _mm512_fmadd_ps(p, r, Bc(kExpP5));
  *n_out = n;
  return _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, Bc(1.0f)));
}

// FastExp's twin: 0 below kExpLo, +inf above kExpHi, NaN for NaN.
inline __m512 Exp(__m512 x) {
  const __mmask16 too_small = _mm512_cmp_ps_mask(x, Bc(kExpLo), _CMP_LT_OQ);
  const __mmask16 too_big = _mm512_cmp_ps_mask(x, Bc(kExpHi), _CMP_GT_OQ);
  // min/max return their second operand when either is NaN: NaN stays.
  x = _mm512_min_ps(Bc(kExpHi), x);
  x = _mm512_max_ps(Bc(kExpLo), x);
  __m512 n;
  const __m512 poly = ExpPoly(x, &n);
  const __m512 p = _mm512_scalef_ps(poly, n);  // poly * 2^n, exact.
  return _mm512_mask_mov_ps(_mm512_maskz_mov_ps(~too_small, p), too_big,
                            Bc(std::numeric_limits<float>::infinity()));
}

// Exp for x clamped into [kExpLo, kExpClampHi], all the activations need.
inline __m512 ExpClamped(__m512 x) {
  x = _mm512_min_ps(Bc(kExpClampHi), x);
  x = _mm512_max_ps(Bc(kExpLo), x);
  __m512 n;
  const __m512 p = ExpPoly(x, &n);
  return _mm512_scalef_ps(p, n);
}

inline float ReduceAdd(__m512 v) {
  const __m256 lo = _mm256_add_ps(
      _mm512_castps512_ps256(v),
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s =
      _mm_add_ps(_mm256_castps256_ps128(lo), _mm256_extractf128_ps(lo, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float ReduceMax(__m512 v) {
  const __m256 lo = _mm256_max_ps(
      _mm512_castps512_ps256(v),
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s =
      _mm_max_ps(_mm256_castps256_ps128(lo), _mm256_extractf128_ps(lo, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Element functions for Map (structs, so that they inline).
struct AffineFn {
  __m512 sub;
  __m512 mul;
  __m512 operator()(__m512 v) const {
    return _mm512_mul_ps(_mm512_sub_ps(v, sub), mul);
  }
};
// exp(-v) for silu as 2^t, t = -v * log2(e) clamped like ExpClamped's
// argument: 2^(t - n) by its polynomial (kExp2C*), scaled by 2^n. Fewer
// multiplies than Exp's two-step reduction by ln 2, which is what bounds silu's
// throughput; the rounding of t adds a relative error of |t| * 2^-24 (< 1e-6
// where silu is not already 0 or v).
inline __m512 ExpNegForSilu(__m512 v) {
  __m512 t = _mm512_mul_ps(v, Bc(-kLog2e));
  t = _mm512_min_ps(Bc(kExpClampHi * kLog2e), t);
  t = _mm512_max_ps(Bc(kExpLo * kLog2e), t);
  const __m512 n = RoundToInt(t);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = Bc(kExp2C6);
  p = _mm512_fmadd_ps(p, f, Bc(kExp2C5));
  p = _mm512_fmadd_ps(p, f, Bc(kExp2C4));
  p = _mm512_fmadd_ps(p, f, Bc(kExp2C3));
  p = _mm512_fmadd_ps(p, f, Bc(kExp2C2));
  p = _mm512_fmadd_ps(p, f, Bc(kExp2C1));
  p = _mm512_fmadd_ps(p, f, Bc(1.0f));
  return _mm512_scalef_ps(p, n);
}

struct SiluFn {
  __m512 operator()(__m512 v) const {
    return _mm512_div_ps(v, _mm512_add_ps(Bc(1.0f), ExpNegForSilu(v)));
  }
};
struct GeluFn {
  __m512 operator()(__m512 v) const {
    const __m512 inner =
        _mm512_fmadd_ps(Bc(kGeluCoef), _mm512_mul_ps(v, v), Bc(1.0f));
    const __m512 minus_2u =
        _mm512_mul_ps(_mm512_mul_ps(Bc(-2.0f * kSqrt2OverPi), v), inner);
    return _mm512_div_ps(v, _mm512_add_ps(Bc(1.0f), ExpClamped(minus_2u)));
  }
};
// max returns its second operand when either is NaN: NaN gives 0, as the
// portable x > 0 ? x : 0 does.
struct ReluFn {
  __m512 operator()(__m512 v) const {
    return _mm512_max_ps(v, _mm512_setzero_ps());
  }
};

template <typename F>
inline void Map(const float* x, float* dst, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    _mm512_storeu_ps(dst + i, f(_mm512_loadu_ps(x + i)));
  }
  if (i < n) {
    const __mmask16 m = FirstLanes(n - i);
    _mm512_mask_storeu_ps(dst + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

template <BinaryOp kOp>
inline __m512 Apply(__m512 a, __m512 b) {
  if constexpr (kOp == BinaryOp::kAdd) return _mm512_add_ps(a, b);
  if constexpr (kOp == BinaryOp::kSub) return _mm512_sub_ps(a, b);
  if constexpr (kOp == BinaryOp::kMul) return _mm512_mul_ps(a, b);
  return _mm512_div_ps(a, b);
}

template <BinaryOp kOp>
void BinaryRowT(const float* a, const float* b, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const __m512 r0 =
        Apply<kOp>(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    const __m512 r1 = Apply<kOp>(_mm512_loadu_ps(a + i + kLanes),
                                 _mm512_loadu_ps(b + i + kLanes));
    _mm512_storeu_ps(dst + i, r0);
    _mm512_storeu_ps(dst + i + kLanes, r1);
  }
  for (; i < n; i += kLanes) {
    const __mmask16 m = FirstLanes(n - i < kLanes ? n - i : kLanes);
    // Masked-off lanes compute 0 op 0 (NaN for div), which is never stored.
    _mm512_mask_storeu_ps(dst + i, m,
                          Apply<kOp>(_mm512_maskz_loadu_ps(m, a + i),
                                     _mm512_maskz_loadu_ps(m, b + i)));
  }
}

template <BinaryOp kOp>
void BinaryRowScalarT(const float* a, float b, float* dst, int64_t n) {
  const __m512 vb = Bc(b);
  Map(a, dst, n, [vb](__m512 v) { return Apply<kOp>(v, vb); });
}

void BinaryRow(BinaryOp op, const float* a, const float* b, float* dst,
               int64_t n) {
  switch (op) {
    case BinaryOp::kAdd:
      return BinaryRowT<BinaryOp::kAdd>(a, b, dst, n);
    case BinaryOp::kSub:
      return BinaryRowT<BinaryOp::kSub>(a, b, dst, n);
    case BinaryOp::kMul:
      return BinaryRowT<BinaryOp::kMul>(a, b, dst, n);
    case BinaryOp::kDiv:
      return BinaryRowT<BinaryOp::kDiv>(a, b, dst, n);
  }
}

void BinaryRowScalar(BinaryOp op, const float* a, float b, float* dst,
                     int64_t n) {
  switch (op) {
    case BinaryOp::kAdd:
      return BinaryRowScalarT<BinaryOp::kAdd>(a, b, dst, n);
    case BinaryOp::kSub:
      return BinaryRowScalarT<BinaryOp::kSub>(a, b, dst, n);
    case BinaryOp::kMul:
      return BinaryRowScalarT<BinaryOp::kMul>(a, b, dst, n);
    case BinaryOp::kDiv:
      return BinaryRowScalarT<BinaryOp::kDiv>(a, b, dst, n);
  }
}

void AffineRow(const float* x, float sub, float mul, float* dst, int64_t n) {
  Map(x, dst, n, AffineFn{Bc(sub), Bc(mul)});
}

void SiluRow(const float* x, float* dst, int64_t n) {
  Map(x, dst, n, SiluFn{});
}

void GeluRow(const float* x, float* dst, int64_t n) {
  Map(x, dst, n, GeluFn{});
}

void ReluRow(const float* x, float* dst, int64_t n) {
  Map(x, dst, n, ReluFn{});
}

float SumRow(const float* x, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    acc0 = _mm512_add_ps(acc0, _mm512_loadu_ps(x + i));
    acc1 = _mm512_add_ps(acc1, _mm512_loadu_ps(x + i + kLanes));
  }
  for (; i < n; i += kLanes) {
    const __mmask16 m = FirstLanes(n - i < kLanes ? n - i : kLanes);
    acc0 = _mm512_add_ps(acc0, _mm512_maskz_loadu_ps(m, x + i));
  }
  return ReduceAdd(_mm512_add_ps(acc0, acc1));
}

float DotRow(const float* x, const float* y, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    acc0 =
        _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + kLanes),
                           _mm512_loadu_ps(y + i + kLanes), acc1);
  }
  for (; i < n; i += kLanes) {
    const __mmask16 m = FirstLanes(n - i < kLanes ? n - i : kLanes);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i),
                           _mm512_maskz_loadu_ps(m, y + i), acc0);
  }
  return ReduceAdd(_mm512_add_ps(acc0, acc1));
}

void AxpyRow(float a, const float* x, float* y, int64_t n) {
  const __m512 va = Bc(a);
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = FirstLanes(n - i < kLanes ? n - i : kLanes);
    _mm512_mask_storeu_ps(y + i, m,
                          _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i),
                                          _mm512_maskz_loadu_ps(m, y + i)));
  }
}

// Row by row with the AVX-512 dot and axpy above (not measured: no
// AVX-512 machine here).
void DotRows(const float* x, const float* rows, int64_t stride, int64_t n_rows,
             int64_t n, float scale, float* out) {
  for (int64_t r = 0; r < n_rows; ++r) {
    out[r] = scale * DotRow(x, rows + r * stride, n);
  }
}

void AxpyRows(const float* a, const float* rows, int64_t stride, int64_t n_rows,
              int64_t n, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) AxpyRow(a[r], rows + r * stride, y, n);
}

float SumSquaresRow(const float* x, float center, int64_t n) {
  const __m512 c = Bc(center);
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(x + i), c);
    const __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(x + i + kLanes), c);
    acc0 = _mm512_fmadd_ps(d0, d0, acc0);
    acc1 = _mm512_fmadd_ps(d1, d1, acc1);
  }
  for (; i < n; i += kLanes) {
    const __mmask16 m = FirstLanes(n - i < kLanes ? n - i : kLanes);
    const __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), c);
    acc0 = _mm512_fmadd_ps(d, d, acc0);
  }
  return ReduceAdd(_mm512_add_ps(acc0, acc1));
}

float ScaleMaskMaxRow(const float* x, const float* mask, float scale,
                      float* dst, int64_t n) {
  const __m512 vs = Bc(scale);
  __m512 vmax = Bc(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = FirstLanes(n - i < kLanes ? n - i : kLanes);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 v =
        mask != nullptr
            ? _mm512_fmadd_ps(xv, vs, _mm512_maskz_loadu_ps(m, mask + i))
            : _mm512_mul_ps(xv, vs);
    _mm512_mask_storeu_ps(dst + i, m, v);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, v);
  }
  return ReduceMax(vmax);
}

float ExpSubRow(float* x, float max, int64_t n) {
  const __m512 vmax = Bc(max);
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m512 e = Exp(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax));
    _mm512_storeu_ps(x + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {
    const __mmask16 m = FirstLanes(n - i);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmax));
    _mm512_mask_storeu_ps(x + i, m, e);
    acc = _mm512_mask_add_ps(acc, m, acc, e);
  }
  return ReduceAdd(acc);
}

inline void SinCos(__m512 v, __m512* sin, __m512* cos) {
  const __m512 j = RoundToInt(_mm512_mul_ps(v, Bc(kTwoOverPi)));
  __m512 y = _mm512_fnmadd_ps(j, Bc(kHalfPi1), v);
  y = _mm512_fnmadd_ps(j, Bc(kHalfPi2), y);
  y = _mm512_fnmadd_ps(j, Bc(kHalfPi3), y);
  const __m512 z = _mm512_mul_ps(y, y);
  __m512 sp = _mm512_fmadd_ps(Bc(kSin3), z, Bc(kSin2));
  sp = _mm512_fmadd_ps(sp, z, Bc(kSin1));
  sp = _mm512_fmadd_ps(_mm512_mul_ps(y, z), sp, y);
  __m512 cp = _mm512_fmadd_ps(Bc(kCos3), z, Bc(kCos2));
  cp = _mm512_fmadd_ps(cp, z, Bc(kCos1));
  cp = _mm512_fmadd_ps(_mm512_mul_ps(z, z), cp,
                       _mm512_fnmadd_ps(Bc(0.5f), z, Bc(1.0f)));
  // Quadrant q = j & 3: odd swaps sin and cos; q & 2 negates sin and
  // (q + 1) & 2 negates cos.
  const __m512i q = _mm512_cvtps_epi32(j);
  const __mmask16 swap = _mm512_test_epi32_mask(q, _mm512_set1_epi32(1));
  const __m512i sin_sign =
      _mm512_slli_epi32(_mm512_and_si512(q, _mm512_set1_epi32(2)), 30);
  const __m512i cos_sign = _mm512_slli_epi32(
      _mm512_and_si512(_mm512_add_epi32(q, _mm512_set1_epi32(1)),
                       _mm512_set1_epi32(2)),
      30);
  *sin = _mm512_castsi512_ps(_mm512_xor_si512(
      _mm512_castps_si512(_mm512_mask_blend_ps(swap, sp, cp)), sin_sign));
  *cos = _mm512_castsi512_ps(_mm512_xor_si512(
      _mm512_castps_si512(_mm512_mask_blend_ps(swap, cp, sp)), cos_sign));
}

void SinCosRow(const float* x, float* sin, float* cos, int64_t n) {
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = FirstLanes(n - i < kLanes ? n - i : kLanes);
    __m512 s, c;
    SinCos(_mm512_maskz_loadu_ps(m, x + i), &s, &c);
    _mm512_mask_storeu_ps(sin + i, m, s);
    _mm512_mask_storeu_ps(cos + i, m, c);
  }
}

// Angles of one token, reduced modulo 2 pi in double (a position times a
// frequency can be large), eight at a time.
void RopeAnglesRow(double position, const double* theta, float* angle,
                   int64_t n) {
  const __m512d p = _mm512_set1_pd(position);
  const __m512d two_pi = _mm512_set1_pd(kTwoPi);
  const __m512d inv_two_pi = _mm512_set1_pd(kInvTwoPi);
  for (int64_t k = 0; k < n; k += 8) {
    const __mmask8 m =
        static_cast<__mmask8>((1u << (n - k < 8 ? n - k : 8)) - 1);
    const __m512d a = _mm512_mul_pd(p, _mm512_maskz_loadu_pd(m, theta + k));
    const __m512d turns =
        _mm512_roundscale_pd(_mm512_mul_pd(a, inv_two_pi),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_ps(
        angle + k, m,
        _mm512_cvtpd_ps(_mm512_sub_pd(a, _mm512_mul_pd(two_pi, turns))));
  }
}

void RopeNormalRow(const float* x, const float* cos2, const float* nsin2,
                   float* dst, int64_t n_dims) {
  // n_dims is even, so a masked tail never splits a pair.
  for (int64_t i = 0; i < n_dims; i += kLanes) {
    const __mmask16 m = FirstLanes(n_dims - i < kLanes ? n_dims - i : kLanes);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 swapped = _mm512_permute_ps(v, 0xb1);  // Pairs exchanged.
    _mm512_mask_storeu_ps(
        dst + i, m,
        _mm512_fmadd_ps(
            v, _mm512_maskz_loadu_ps(m, cos2 + i),
            _mm512_mul_ps(swapped, _mm512_maskz_loadu_ps(m, nsin2 + i))));
  }
}

void RopeNeoxRow(const float* x, const float* cos, const float* sin, float* dst,
                 int64_t half) {
  for (int64_t k = 0; k < half; k += kLanes) {
    const __mmask16 m = FirstLanes(half - k < kLanes ? half - k : kLanes);
    const __m512 x0 = _mm512_maskz_loadu_ps(m, x + k);
    const __m512 x1 = _mm512_maskz_loadu_ps(m, x + k + half);
    const __m512 c = _mm512_maskz_loadu_ps(m, cos + k);
    const __m512 s = _mm512_maskz_loadu_ps(m, sin + k);
    _mm512_mask_storeu_ps(dst + k, m,
                          _mm512_fmsub_ps(x0, c, _mm512_mul_ps(x1, s)));
    _mm512_mask_storeu_ps(dst + k + half, m,
                          _mm512_fmadd_ps(x0, s, _mm512_mul_ps(x1, c)));
  }
}

// f32 -> bf16 rounding to nearest even (quieting NaNs), as F32ToBF16 does.
inline __m512i ToBF16Bits(__m512i x) {
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
      _mm512_set1_epi32(0x7f800000));
  const __m512i odd =
      _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)),
      16);
  const __m512i nan =
      _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_blend_epi32(is_nan, rounded, nan);
}

// Contiguous conversions between float types, tails masked.
bool ConvertRow(DType src_type, const void* src_v, DType dst_type, void* dst_v,
                int64_t n) {
  const auto* src = static_cast<const std::byte*>(src_v);
  auto* dst = static_cast<std::byte*>(dst_v);
  if (src_type == DType::kF16 && dst_type == DType::kF32) {
    for (int64_t i = 0; i < n; i += kLanes) {
      const __mmask16 m = FirstLanes(n - i < kLanes ? n - i : kLanes);
      const __m256i h = _mm256_maskz_loadu_epi16(m, src + 2 * i);
      _mm512_mask_storeu_ps(dst + 4 * i, m, _mm512_cvtph_ps(h));
    }
  } else if (src_type == DType::kBF16 && dst_type == DType::kF32) {
    for (int64_t i = 0; i < n; i += kLanes) {
      const __mmask16 m = FirstLanes(n - i < kLanes ? n - i : kLanes);
      const __m256i h = _mm256_maskz_loadu_epi16(m, src + 2 * i);
      _mm512_mask_storeu_epi32(dst + 4 * i, m,
                               _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  } else if (src_type == DType::kF32 && dst_type == DType::kF16) {
    for (int64_t i = 0; i < n; i += kLanes) {
      const __mmask16 m = FirstLanes(n - i < kLanes ? n - i : kLanes);
      const __m256i h =
          _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + 4 * i),
                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_mask_storeu_epi16(dst + 2 * i, m, h);
    }
  } else if (src_type == DType::kF32 && dst_type == DType::kBF16) {
    for (int64_t i = 0; i < n; i += kLanes) {
      const __mmask16 m = FirstLanes(n - i < kLanes ? n - i : kLanes);
      _mm512_mask_cvtepi32_storeu_epi16(
          dst + 2 * i, m, ToBF16Bits(_mm512_maskz_loadu_epi32(m, src + 4 * i)));
    }
  } else {
    return false;
  }
  return true;
}

}  // namespace

const VecKernels& Avx512Kernels() {
  static constexpr VecKernels kKernels = {
      .binary_row = BinaryRow,
      .binary_row_scalar = BinaryRowScalar,
      .affine_row = AffineRow,
      .silu_row = SiluRow,
      .gelu_row = GeluRow,
      .relu_row = ReluRow,
      .sum_row = SumRow,
      .sum_squares_row = SumSquaresRow,
      .dot_row = DotRow,
      .axpy_row = AxpyRow,
      .dot_rows = DotRows,
      .axpy_rows = AxpyRows,
      .dot_rows_f16 = nullptr,  // The AVX2 ones (vec_isa.h).
      .axpy_rows_f16 = nullptr,
      .scale_mask_max_row = ScaleMaskMaxRow,
      .exp_sub_row = ExpSubRow,
      .sin_cos_row = SinCosRow,
      .rope_angles_row = RopeAnglesRow,
      .rope_normal_row = RopeNormalRow,
      .rope_neox_row = RopeNeoxRow,
      .convert_row = ConvertRow,
  };
  return kKernels;
}

FERRY_AVX512_END
}  // namespace cpu_kernels_internal
}  // namespace ferry
