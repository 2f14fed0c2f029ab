// AVX2 mul_mat kernels (needs avx2, fma and f16c).
//
// Same design as the AVX-512 file with 8-lane vectors: the tile is 6 rows of
// dst by 16 columns (12 ymm accumulators, 2 loads and 6 broadcasts per k), A
// is converted to f32 and transposed into [k][16] panels while packing.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ferry/backends/host/internal/mat_mul_gemm.h"
#include "ferry/backends/host/internal/mat_mul_impl.h"
#include "ferry/backends/host/internal/mat_mul_packed.h"
#include "ferry/backends/host/internal/packed_layout.h"
#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_internal {
namespace {

// Loads 8 elements of type T as f32. Partial reads only the first n (< 8)
// through a zeroed copy, since AVX2 has no masked 16-bit loads.
template <typename T>
struct Loader;

template <>
struct Loader<float> {
  static __m256 Full(const float* p) { return _mm256_loadu_ps(p); }
};

template <>
struct Loader<Half> {
  static __m256 Full(const Half* p) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};

template <>
struct Loader<BFloat16> {
  static __m256 Full(const BFloat16* p) {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  }
};

template <typename T>
__m256 LoadPartial(const T* p, int64_t n) {
  T tmp[8];
  std::memset(tmp, 0, sizeof(tmp));
  std::memcpy(tmp, p, n * sizeof(T));
  return Loader<T>::Full(tmp);
}

// Lanes [0, n) set, for maskload/maskstore.
__m256i FirstLanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Transposes the 8x8 matrix whose rows are r[0..7], in place.
void Transpose8(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  __m256 u[8];
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

struct Avx2Kernel {
  static constexpr int kRows = 6;
  static constexpr int kVecs = 2;
  static constexpr int64_t kMr = kRows;
  static constexpr int64_t kNr = 8 * kVecs;
  static constexpr int64_t kKc = 256;
  static constexpr int64_t kMc = 16 * kNr;
  static constexpr int64_t kNc = kMr * (2048 / kMr);

  template <typename T>
  static void PackATyped(const T* a, int64_t lda, int64_t m0, int64_t mc,
                         int64_t k0, int64_t kc, float* dst) {
    for (int64_t p = 0; p < mc; p += kNr) {
      float* panel = dst + p * kc;
      for (int64_t g = 0; g < kNr; g += 8) {
        const int64_t rows = std::clamp<int64_t>(mc - p - g, 0, 8);
        const T* src = a + (m0 + p + g) * lda + k0;
        for (int64_t kk = 0; kk < kc; kk += 8) {
          const int64_t klen = std::min<int64_t>(8, kc - kk);
          __m256 r[8];
          for (int i = 0; i < 8; ++i) {
            if (i >= rows) {
              r[i] = _mm256_setzero_ps();
            } else if (klen == 8) {
              r[i] = Loader<T>::Full(src + i * lda + kk);
            } else {
              r[i] = LoadPartial(src + i * lda + kk, klen);
            }
          }
          Transpose8(r);
          float* out = panel + kk * kNr + g;
          for (int j = 0; j < klen; ++j) _mm256_store_ps(out + j * kNr, r[j]);
        }
      }
    }
  }

  static void PackA(const MatMulArgs& args, int64_t m0, int64_t mc, int64_t k0,
                    int64_t kc, float* dst) {
    switch (args.a_type) {
      case DType::kF16:
        return PackATyped(static_cast<const Half*>(args.a), args.lda, m0, mc,
                          k0, kc, dst);
      case DType::kBF16:
        return PackATyped(static_cast<const BFloat16*>(args.a), args.lda, m0,
                          mc, k0, kc, dst);
      default:
        return PackATyped(static_cast<const float*>(args.a), args.lda, m0, mc,
                          k0, kc, dst);
    }
  }

  static void PackB(const float* b, int64_t ldb, int64_t n0, int64_t nc,
                    int64_t k0, int64_t kc, float* dst) {
    PackRowsB<Avx2Kernel>(b, ldb, n0, nc, k0, kc, dst);
  }

  static void Tile(int64_t kc, const float* pa, const float* pb, float* c,
                   int64_t ldc, int rows, int cols, bool accumulate) {
    __m256 acc[kRows][kVecs];
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < kc; ++k) {
      __m256 av[kVecs];
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) av[v] = _mm256_load_ps(pa + 8 * v);
#pragma GCC unroll 16
      for (int r = 0; r < kRows; ++r) {
        const __m256 bv = _mm256_broadcast_ss(pb + r);
#pragma GCC unroll 16
        for (int v = 0; v < kVecs; ++v) {
          acc[r][v] = _mm256_fmadd_ps(av[v], bv, acc[r][v]);
        }
      }
      pa += kNr;
      pb += kRows;
    }
    const bool full_cols = cols == kNr;
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      if (r >= rows) break;
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) {
        float* p = c + r * ldc + 8 * v;
        if (full_cols) {
          const __m256 x = accumulate
                               ? _mm256_add_ps(acc[r][v], _mm256_loadu_ps(p))
                               : acc[r][v];
          _mm256_storeu_ps(p, x);
        } else {
          const __m256i mask = FirstLanes(cols - 8 * v);
          const __m256 x =
              accumulate ? _mm256_add_ps(acc[r][v], _mm256_maskload_ps(p, mask))
                         : acc[r][v];
          _mm256_maskstore_ps(p, mask, x);
        }
      }
    }
  }

  // Packed weights (mat_mul_packed.h): a panel is four tiles wide, so the
  // tile walks it as four 16-column strips (rows kNr floats apart from one
  // panel row to the next); a single row takes the whole width at once.
  static constexpr int64_t kPackedKc = 256;
  static constexpr int64_t kPackedNc = kMr * 64;
  static constexpr int kStrips = kPanelWidth / kNr;

  // Writes (or adds) v to the first `cols` (<= 8) floats at p.
  static void StoreVec(float* p, __m256 v, int cols, bool accumulate) {
    if (cols >= 8) {
      _mm256_storeu_ps(p,
                       accumulate ? _mm256_add_ps(v, _mm256_loadu_ps(p)) : v);
      return;
    }
    if (cols <= 0) return;
    const __m256i mask = FirstLanes(cols);
    _mm256_maskstore_ps(
        p, mask,
        accumulate ? _mm256_add_ps(v, _mm256_maskload_ps(p, mask)) : v);
  }

  template <typename T, int kR>
  static void StripRows(int64_t kc, const T* pa, const float* pb, float* c,
                        int64_t ldc, int cols, bool accumulate,
                        const char*& prefetch, const char* prefetch_end) {
    __m256 acc[kR][kVecs];
#pragma GCC unroll 16
    for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < kc; ++k) {
      // Up to two lines a step: a share is at most two per step unless
      // there is only one micro-panel (then the loads stream anyway).
      for (int i = 0; i < 2 && prefetch < prefetch_end; ++i) {
        _mm_prefetch(prefetch, _MM_HINT_T1);
        prefetch += 64;
      }
      __m256 av[kVecs];
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) av[v] = Loader<T>::Full(pa + 8 * v);
#pragma GCC unroll 16
      for (int r = 0; r < kR; ++r) {
        const __m256 bv = _mm256_broadcast_ss(pb + r);
#pragma GCC unroll 16
        for (int v = 0; v < kVecs; ++v) {
          acc[r][v] = _mm256_fmadd_ps(av[v], bv, acc[r][v]);
        }
      }
      pa += kPanelWidth;
      pb += kMr;
    }
#pragma GCC unroll 16
    for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) {
        StoreVec(c + r * ldc + 8 * v, acc[r][v], cols - 8 * v, accumulate);
      }
    }
  }

  template <typename T>
  static void PanelRow(int64_t kc, const T* pa, const float* pb, float* c,
                       int cols, bool accumulate) {
    constexpr int kLanes = kPanelWidth / 8;
    __m256 acc[kLanes];
#pragma GCC unroll 16
    for (int v = 0; v < kLanes; ++v) acc[v] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
      const __m256 bv = _mm256_broadcast_ss(pb);
#pragma GCC unroll 16
      for (int v = 0; v < kLanes; ++v) {
        acc[v] = _mm256_fmadd_ps(Loader<T>::Full(pa + 8 * v), bv, acc[v]);
      }
      pa += kPanelWidth;
      pb += kMr;
    }
#pragma GCC unroll 16
    for (int v = 0; v < kLanes; ++v) {
      StoreVec(c + 8 * v, acc[v], cols - 8 * v, accumulate);
    }
  }

  template <typename T>
  static void PanelTile(int rows, int64_t kc, const T* pa, const float* pb,
                        float* c, int64_t ldc, int cols, bool accumulate,
                        const char* pf, const char* pf_end) {
    static_assert(kRows == 6);
    if (rows == 1) return PanelRow<T>(kc, pa, pb, c, cols, accumulate);
    for (int s = 0; s < kStrips && s * kNr < cols; ++s) {
      const int strip_cols = std::min<int>(kNr, cols - s * kNr);
      const T* spa = pa + s * kNr;
      float* sc = c + s * kNr;
      switch (rows) {
        case 2:
          StripRows<T, 2>(kc, spa, pb, sc, ldc, strip_cols, accumulate, pf,
                          pf_end);
          break;
        case 3:
          StripRows<T, 3>(kc, spa, pb, sc, ldc, strip_cols, accumulate, pf,
                          pf_end);
          break;
        case 4:
          StripRows<T, 4>(kc, spa, pb, sc, ldc, strip_cols, accumulate, pf,
                          pf_end);
          break;
        case 5:
          StripRows<T, 5>(kc, spa, pb, sc, ldc, strip_cols, accumulate, pf,
                          pf_end);
          break;
        default:
          StripRows<T, 6>(kc, spa, pb, sc, ldc, strip_cols, accumulate, pf,
                          pf_end);
          break;
      }
    }
  }

  // One dot product of an A row with a B row, 8 lanes at a time.
  template <typename T>
  static float DotRow(const T* a, const float* b, int64_t k) {
    __m256 acc0 = _mm256_setzero_ps();
    __m256 acc1 = _mm256_setzero_ps();
    int64_t kk = 0;
    for (; kk + 16 <= k; kk += 16) {
      acc0 = _mm256_fmadd_ps(Loader<T>::Full(a + kk), _mm256_loadu_ps(b + kk),
                             acc0);
      acc1 = _mm256_fmadd_ps(Loader<T>::Full(a + kk + 8),
                             _mm256_loadu_ps(b + kk + 8), acc1);
    }
    for (; kk < k; kk += 8) {
      const int64_t len = std::min<int64_t>(8, k - kk);
      acc0 = _mm256_fmadd_ps(LoadPartial(a + kk, len), LoadPartial(b + kk, len),
                             acc0);
    }
    return HorizontalSum(_mm256_add_ps(acc0, acc1));
  }

  template <typename T>
  static void DotTyped(const MatMulArgs& args, Range mr) {
    const T* a = static_cast<const T*>(args.a);
    for (int64_t m = mr.begin; m < mr.end; ++m) {
      for (int64_t n = 0; n < args.n; ++n) {
        args.dst[n * args.ldc + m] =
            DotRow(a + m * args.lda, args.b + n * args.ldb, args.k);
      }
    }
  }

  static void Dot(const MatMulArgs& args, Range mr) {
    switch (args.a_type) {
      case DType::kF16:
        return DotTyped<Half>(args, mr);
      case DType::kBF16:
        return DotTyped<BFloat16>(args, mr);
      default:
        return DotTyped<float>(args, mr);
    }
  }
};

}  // namespace

void MatMulAvx2(const MatMulArgs& args, int ith, int nth) {
  if (args.a_packed) return PackedGemmThread<Avx2Kernel>(args, ith, nth);
  GemmThread<Avx2Kernel>(args, ith, nth);
}

}  // namespace cpu_internal
}  // namespace ferry
