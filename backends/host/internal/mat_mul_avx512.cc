// AVX-512 mul_mat kernels (needs avx512f/bw/vl/dq, fma and f16c).
//
// The GEMM tile is kMr = 6 rows of dst by kNr = 64 columns: 24 zmm
// accumulators, 4 loads of packed A and 6 broadcasts of packed B per k, so
// FMAs outnumber loads 24 to 10 and the FMA pipes stay full. A (the weight)
// is transposed into [k][64] panels while packing, which is also where f16 and
// bf16 become f32, so the tile only ever sees f32.
// GCC 12's AVX-512 intrinsics self-initialise their "undefined" operands and
// then warn about it wherever they are inlined (GCC PR105593, fixed in 13),
// so these two warnings are off for this whole file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <algorithm>
#include <cstdint>

#include "ferry/backends/host/internal/avx512_intrinsics.h"
#include "ferry/backends/host/internal/mat_mul_gemm.h"
#include "ferry/backends/host/internal/mat_mul_impl.h"
#include "ferry/backends/host/internal/mat_mul_packed.h"
#include "ferry/backends/host/internal/packed_layout.h"
#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_internal {
FERRY_AVX512_BEGIN
namespace {

// Lanes [0, n) set; n may be out of [0, 16].
__mmask16 FirstLanes(int64_t n) {
  if (n <= 0) return 0;
  return n >= 16 ? static_cast<__mmask16>(0xffff)
                 : static_cast<__mmask16>((1u << n) - 1);
}

// Sums the lanes of v. (GCC 12's _mm512_reduce_add_ps trips
// -Wmaybe-uninitialized at -O1.)
float ReduceAdd(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
  __m128 s = _mm512_castps512_ps128(v);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Loads 16 elements of type T as f32; Masked reads only the lanes in `mask`
// (others are 0), so it never touches memory past a row's end.
template <typename T>
struct Loader;

template <>
struct Loader<float> {
  static __m512 Full(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 Masked(const float* p, __mmask16 mask) {
    return _mm512_maskz_loadu_ps(mask, p);
  }
};

template <>
struct Loader<Half> {
  static __m512 Full(const Half* p) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 Masked(const Half* p, __mmask16 mask) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));
  }
};

template <>
struct Loader<BFloat16> {
  static __m512 Widen(__m256i bits) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  static __m512 Full(const BFloat16* p) {
    return Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 Masked(const BFloat16* p, __mmask16 mask) {
    return Widen(_mm256_maskz_loadu_epi16(mask, p));
  }
};

// Transposes the 16x16 matrix whose rows are r[0..15], in place.
void Transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // r[4q + j] now holds column j + 4 * lane-in-quad of rows 4q..4q+3, per
  // 128-bit lane; the two f32x4 shuffle rounds gather the lanes.
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}

template <int kRows, int kVecs>
struct Avx512Kernel {
  static constexpr int64_t kMr = kRows;
  static constexpr int64_t kNr = 16 * kVecs;
  static constexpr int64_t kKc = 512;
  static constexpr int64_t kMc = 4 * kNr;
  static constexpr int64_t kNc = kMr * (2048 / kMr);

  template <typename T>
  static void PackATyped(const T* a, int64_t lda, int64_t m0, int64_t mc,
                         int64_t k0, int64_t kc, float* dst) {
    for (int64_t p = 0; p < mc; p += kNr) {
      float* panel = dst + p * kc;
      for (int64_t g = 0; g < kNr; g += 16) {
        const int64_t rows = std::clamp<int64_t>(mc - p - g, 0, 16);
        const T* src = a + (m0 + p + g) * lda + k0;
        for (int64_t kk = 0; kk < kc; kk += 16) {
          const int64_t klen = std::min<int64_t>(16, kc - kk);
          __m512 r[16];
          if (klen == 16) {
            for (int i = 0; i < 16; ++i) {
              r[i] = i < rows ? Loader<T>::Full(src + i * lda + kk)
                              : _mm512_setzero_ps();
            }
          } else {
            const __mmask16 mask = FirstLanes(klen);
            for (int i = 0; i < 16; ++i) {
              r[i] = i < rows ? Loader<T>::Masked(src + i * lda + kk, mask)
                              : _mm512_setzero_ps();
            }
          }
          Transpose16(r);
          float* out = panel + kk * kNr + g;
          for (int j = 0; j < klen; ++j) _mm512_store_ps(out + j * kNr, r[j]);
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

  // Packs B 16 rows by 16 k at a time: transposes so each vector holds one
  // k of 16 consecutive rows, then scatters its lanes to the (up to four)
  // kMr-row panels they belong to with masked stores.
  static void PackB(const float* b, int64_t ldb, int64_t n0, int64_t nc,
                    int64_t k0, int64_t kc, float* dst) {
    const int64_t padded = (nc + kMr - 1) / kMr * kMr;
    for (int64_t j = 0; j < padded; j += 16) {
      const int64_t rows = std::clamp<int64_t>(nc - j, 0, 16);
      const int64_t lanes = std::min<int64_t>(16, padded - j);
      // Lanes [lo, hi) go to panel p at dst + p * kc * kMr + k * kMr +
      // (j + lane - p * kMr).
      constexpr int kMaxPanels = 16 / kMr + 2;
      __mmask16 masks[kMaxPanels];
      float* bases[kMaxPanels];
      int panels = 0;
      for (int64_t p = j / kMr; p * kMr < j + lanes; ++p) {
        const int64_t lo = std::max(j, p * kMr) - j;
        const int64_t hi = std::min(j + lanes, (p + 1) * kMr) - j;
        masks[panels] =
            static_cast<__mmask16>(FirstLanes(hi) & ~FirstLanes(lo));
        bases[panels] = dst + p * kc * kMr + (j - p * kMr);
        ++panels;
      }
      const float* src = b + (n0 + j) * ldb + k0;
      for (int64_t kk = 0; kk < kc; kk += 16) {
        const int64_t klen = std::min<int64_t>(16, kc - kk);
        const __mmask16 kmask = FirstLanes(klen);
        __m512 r[16];
        for (int i = 0; i < 16; ++i) {
          r[i] = i < rows ? _mm512_maskz_loadu_ps(kmask, src + i * ldb + kk)
                          : _mm512_setzero_ps();
        }
        Transpose16(r);
        for (int t = 0; t < klen; ++t) {
          for (int q = 0; q < panels; ++q) {
            _mm512_mask_storeu_ps(bases[q] + (kk + t) * kMr, masks[q], r[t]);
          }
        }
      }
    }
  }

  static void Tile(int64_t kc, const float* pa, const float* pb, float* c,
                   int64_t ldc, int rows, int cols, bool accumulate) {
    __m512 acc[kRows][kVecs];
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < kc; ++k) {
      __m512 av[kVecs];
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) av[v] = _mm512_load_ps(pa + 16 * v);
#pragma GCC unroll 16
      for (int r = 0; r < kRows; ++r) {
        const __m512 bv = _mm512_set1_ps(pb[r]);
#pragma GCC unroll 16
        for (int v = 0; v < kVecs; ++v) {
          acc[r][v] = _mm512_fmadd_ps(av[v], bv, acc[r][v]);
        }
      }
      pa += kNr;
      pb += kRows;
    }
    if (rows == kRows && cols == kNr) {
#pragma GCC unroll 16
      for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 16
        for (int v = 0; v < kVecs; ++v) {
          float* p = c + r * ldc + 16 * v;
          const __m512 x = accumulate
                               ? _mm512_add_ps(acc[r][v], _mm512_loadu_ps(p))
                               : acc[r][v];
          _mm512_storeu_ps(p, x);
        }
      }
      return;
    }
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      if (r >= rows) break;
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) {
        const __mmask16 mask = FirstLanes(cols - 16 * v);
        float* p = c + r * ldc + 16 * v;
        const __m512 x =
            accumulate
                ? _mm512_add_ps(acc[r][v], _mm512_maskz_loadu_ps(mask, p))
                : acc[r][v];
        _mm512_mask_storeu_ps(p, mask, x);
      }
    }
  }

  // Packed weights (mat_mul_packed.h): a panel is exactly one tile wide.
  static_assert(kNr == kPanelWidth);
  static constexpr int64_t kPackedKc = 256;
  static constexpr int64_t kPackedNc = kMr * 64;

  // Writes (or adds) acc's first `rows` rows and `cols` columns to c.
  template <int kR>
  static void StoreTile(const __m512 (&acc)[kR][kVecs], float* c, int64_t ldc,
                        int cols, bool accumulate) {
    if (cols == kNr) {
#pragma GCC unroll 16
      for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 16
        for (int v = 0; v < kVecs; ++v) {
          float* p = c + r * ldc + 16 * v;
          const __m512 x = accumulate
                               ? _mm512_add_ps(acc[r][v], _mm512_loadu_ps(p))
                               : acc[r][v];
          _mm512_storeu_ps(p, x);
        }
      }
      return;
    }
#pragma GCC unroll 16
    for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) {
        const __mmask16 mask = FirstLanes(cols - 16 * v);
        float* p = c + r * ldc + 16 * v;
        const __m512 x =
            accumulate
                ? _mm512_add_ps(acc[r][v], _mm512_maskz_loadu_ps(mask, p))
                : acc[r][v];
        _mm512_mask_storeu_ps(p, mask, x);
      }
    }
  }

  // kR rows of dst from a packed panel. With one or two rows the panel is
  // all that is read and memory bound, so the K range is cut into kStreams
  // parts walked side by side: more lines in flight than one stream gets
  // from the prefetchers, and independent accumulators for each part (one
  // set would wait on its own FMAs).
  template <typename T, int kR>
  static void PanelTileRows(int64_t kc, const T* pa, const float* pb, float* c,
                            int64_t ldc, int cols, bool accumulate,
                            const char* prefetch, const char* prefetch_end) {
    constexpr int kStreams = kR == 1 ? 4 : kR == 2 ? 2 : 1;
    __m512 acc[kStreams][kR][kVecs];
#pragma GCC unroll 16
    for (int s = 0; s < kStreams; ++s) {
#pragma GCC unroll 16
      for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 16
        for (int v = 0; v < kVecs; ++v) acc[s][r][v] = _mm512_setzero_ps();
      }
    }
    const int64_t part = kc / kStreams;
    const T* spa[kStreams];
    const float* spb[kStreams];
#pragma GCC unroll 16
    for (int s = 0; s < kStreams; ++s) {
      spa[s] = pa + s * part * kNr;
      spb[s] = pb + s * part * kMr;
    }
    for (int64_t k = 0; k < part; ++k) {
      // Up to two lines a step: a share is at most two per step unless
      // there is only one micro-panel (then the loads stream anyway).
      for (int i = 0; i < 2 && prefetch < prefetch_end; ++i) {
        _mm_prefetch(prefetch, _MM_HINT_T1);
        prefetch += 64;
      }
#pragma GCC unroll 16
      for (int s = 0; s < kStreams; ++s) {
        __m512 av[kVecs];
#pragma GCC unroll 16
        for (int v = 0; v < kVecs; ++v) {
          av[v] = Loader<T>::Full(spa[s] + k * kNr + 16 * v);
        }
#pragma GCC unroll 16
        for (int r = 0; r < kR; ++r) {
          const __m512 bv = _mm512_set1_ps(spb[s][k * kMr + r]);
#pragma GCC unroll 16
          for (int v = 0; v < kVecs; ++v) {
            acc[s][r][v] = _mm512_fmadd_ps(av[v], bv, acc[s][r][v]);
          }
        }
      }
    }
    for (int64_t k = kStreams * part; k < kc; ++k) {
      __m512 av[kVecs];
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) {
        av[v] = Loader<T>::Full(pa + k * kNr + 16 * v);
      }
#pragma GCC unroll 16
      for (int r = 0; r < kR; ++r) {
        const __m512 bv = _mm512_set1_ps(pb[k * kMr + r]);
#pragma GCC unroll 16
        for (int v = 0; v < kVecs; ++v) {
          acc[0][r][v] = _mm512_fmadd_ps(av[v], bv, acc[0][r][v]);
        }
      }
    }
#pragma GCC unroll 16
    for (int s = 1; s < kStreams; ++s) {
#pragma GCC unroll 16
      for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 16
        for (int v = 0; v < kVecs; ++v) {
          acc[0][r][v] = _mm512_add_ps(acc[0][r][v], acc[s][r][v]);
        }
      }
    }
    StoreTile<kR>(acc[0], c, ldc, cols, accumulate);
  }

  template <typename T>
  static void PanelTile(int rows, int64_t kc, const T* pa, const float* pb,
                        float* c, int64_t ldc, int cols, bool accumulate,
                        const char* pf, const char* pf_end) {
    static_assert(kRows == 6);
    switch (rows) {
      case 1:
        return PanelTileRows<T, 1>(kc, pa, pb, c, ldc, cols, accumulate, pf,
                                   pf_end);
      case 2:
        return PanelTileRows<T, 2>(kc, pa, pb, c, ldc, cols, accumulate, pf,
                                   pf_end);
      case 3:
        return PanelTileRows<T, 3>(kc, pa, pb, c, ldc, cols, accumulate, pf,
                                   pf_end);
      case 4:
        return PanelTileRows<T, 4>(kc, pa, pb, c, ldc, cols, accumulate, pf,
                                   pf_end);
      case 5:
        return PanelTileRows<T, 5>(kc, pa, pb, c, ldc, cols, accumulate, pf,
                                   pf_end);
      default:
        return PanelTileRows<T, 6>(kc, pa, pb, c, ldc, cols, accumulate, pf,
                                   pf_end);
    }
  }

  // Dot products of 4 (or 1) rows of A with each row of B, 16 lanes at a
  // time; used for n <= kMaxDotN, where the weight read is all that counts.
  template <typename T>
  static void DotTyped(const MatMulArgs& args, Range mr) {
    const T* a = static_cast<const T*>(args.a);
    const int64_t k = args.k;
    const __mmask16 tail = FirstLanes(k % 16);
    const int64_t k_full = k - k % 16;
    int64_t m = mr.begin;
    for (; m + 4 <= mr.end; m += 4) {
      const T* rows[4];
      for (int i = 0; i < 4; ++i) rows[i] = a + (m + i) * args.lda;
      for (int64_t n = 0; n < args.n; ++n) {
        const float* b = args.b + n * args.ldb;
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(),
                         _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int64_t kk = 0; kk < k_full; kk += 16) {
          const __m512 bv = _mm512_loadu_ps(b + kk);
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            acc[i] = _mm512_fmadd_ps(Loader<T>::Full(rows[i] + kk), bv, acc[i]);
          }
        }
        if (k_full < k) {
          const __m512 bv = _mm512_maskz_loadu_ps(tail, b + k_full);
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            acc[i] = _mm512_fmadd_ps(Loader<T>::Masked(rows[i] + k_full, tail),
                                     bv, acc[i]);
          }
        }
        float* d = args.dst + n * args.ldc + m;
        for (int i = 0; i < 4; ++i) d[i] = ReduceAdd(acc[i]);
      }
    }
    for (; m < mr.end; ++m) {
      const T* row = a + m * args.lda;
      for (int64_t n = 0; n < args.n; ++n) {
        const float* b = args.b + n * args.ldb;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t kk = 0; kk < k_full; kk += 16) {
          acc = _mm512_fmadd_ps(Loader<T>::Full(row + kk),
                                _mm512_loadu_ps(b + kk), acc);
        }
        if (k_full < k) {
          acc = _mm512_fmadd_ps(Loader<T>::Masked(row + k_full, tail),
                                _mm512_maskz_loadu_ps(tail, b + k_full), acc);
        }
        args.dst[n * args.ldc + m] = ReduceAdd(acc);
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

void MatMulAvx512(const MatMulArgs& args, int ith, int nth) {
  if (args.a_packed)
    return PackedGemmThread<Avx512Kernel<6, 4>>(args, ith, nth);
  GemmThread<Avx512Kernel<6, 4>>(args, ith, nth);
}

FERRY_AVX512_END
}  // namespace cpu_internal
}  // namespace ferry
