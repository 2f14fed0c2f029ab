// AVX2 tiles of quantized dot products (compiled with -mavx2 -mfma -mf16c).
// A tile is kRows weight rows by kTokens activation rows: per block, each
// weight row's 32 values are unpacked to bytes once and multiplied with
// every token's block (maddubs: unsigned by signed bytes, so signed weights
// go in as |w| with the sign moved onto the activation), and each product
// vector is scaled by d_w * d_a into that pair's float accumulator.
// Accumulators stay in registers: 2 x 4 of them, the activations' blocks
// and the unpacked row take most of the 16 ymm registers (measured on an
// AVX2-only EPYC, 1536 x 576 q4_1, 8 tokens: 2 x 4 0.71x of the per-token
// dots' time, 4 x 2 0.76x; scales gathered apart from the integer loop
// 1.0x).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "ferry/backends/host/internal/avx2_blocks.h"
#include "ferry/backends/host/internal/quant_group_layout.h"
#include "ferry/backends/host/internal/quant_tile_kernels.h"
#include "ferry/quant/block_formats.h"

namespace ferry {
namespace cpu_internal {
namespace {

using host_avx2::DotUnsigned;
using host_avx2::Half;
using host_avx2::HorizontalSum;
using host_avx2::Load32;
using host_avx2::Nibbles;

using quant::kQK;

constexpr int kRows = 2;
constexpr int kTokens = 4;

// Weight formats. Unpack gives the block's 32 values as bytes for
// DotUnsigned: unsigned ones as they are; signed ones as |w|, with Signs
// moving each sign onto the activation.
struct Q4_0 {
  using Block = quant::BlockQ4_0;
  using Act = quant::BlockQ8_0;
  static constexpr bool kSigned = true;
  static constexpr bool kMin = false;
  static __m256i Values(const Block& b) {
    return _mm256_sub_epi8(Nibbles(b.qs), _mm256_set1_epi8(8));
  }
};

struct Q4_1 {
  using Block = quant::BlockQ4_1;
  using Act = quant::BlockQ8_1;
  static constexpr bool kSigned = false;
  static constexpr bool kMin = true;
  static __m256i Values(const Block& b) { return Nibbles(b.qs); }
};

struct Q8_0 {
  using Block = quant::BlockQ8_0;
  using Act = quant::BlockQ8_0;
  static constexpr bool kSigned = true;
  static constexpr bool kMin = false;
  static __m256i Values(const Block& b) { return Load32(b.qs); }
};

// One tile of R rows by T tokens at (i0, j0).
template <class F, int R, int T>
void Tile(const QuantTileArgs& p, int64_t i0, int64_t j0) {
  using Block = typename F::Block;
  using Act = typename F::Act;
  const int64_t nb = p.k / kQK;
  const Block* w[R];
  const Act* a[T];
  for (int r = 0; r < R; ++r) {
    w[r] = reinterpret_cast<const Block*>(p.w + (i0 + r) * p.w_row_bytes);
  }
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const Act*>(p.act + (j0 + t) * p.act_row_bytes);
  }
  __m256 acc[R][T];
  float mins[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      acc[r][t] = _mm256_setzero_ps();
      mins[r][t] = 0.0f;
    }
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i av[T];
    float ad[T];
    for (int t = 0; t < T; ++t) {
      av[t] = Load32(a[t][b].qs);
      ad[t] = Half(a[t][b].d);
    }
    for (int r = 0; r < R; ++r) {
      const __m256i v = F::Values(w[r][b]);
      const float wd = Half(w[r][b].d);
      const __m256i u = F::kSigned ? _mm256_sign_epi8(v, v) : v;
      for (int t = 0; t < T; ++t) {
        const __m256i s = F::kSigned ? _mm256_sign_epi8(av[t], v) : av[t];
        const __m256 prod = _mm256_cvtepi32_ps(DotUnsigned(u, s));
        acc[r][t] =
            _mm256_fmadd_ps(_mm256_set1_ps(wd * ad[t]), prod, acc[r][t]);
      }
      if constexpr (F::kMin) {
        const float wm = Half(w[r][b].m);
        for (int t = 0; t < T; ++t) mins[r][t] += wm * Half(a[t][b].s);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      p.dst[(j0 + t) * p.ldc + i0 + r] = HorizontalSum(acc[r][t]) + mins[r][t];
    }
  }
}

using TileFn = void (*)(const QuantTileArgs&, int64_t, int64_t);

// Every tile size up to kRows x kTokens: full tiles and the edges.
template <class F>
struct Tiles {
  template <int R, int... T>
  static constexpr void Row(TileFn (&out)[kRows][kTokens],
                            std::integer_sequence<int, T...>) {
    ((out[R][T] = &Tile<F, R + 1, T + 1>), ...);
  }
  template <int... R>
  static constexpr void All(TileFn (&out)[kRows][kTokens],
                            std::integer_sequence<int, R...>) {
    (Row<R>(out, std::make_integer_sequence<int, kTokens>()), ...);
  }
  TileFn fn[kRows][kTokens] = {};
  constexpr Tiles() { All(fn, std::make_integer_sequence<int, kRows>()); }
};

template <class F>
void Compute(const QuantTileArgs& p, int64_t row_begin, int64_t row_end,
             int64_t token_begin, int64_t token_end) {
  static constexpr Tiles<F> kTiles;
  // Rows outer: a run of rows stays in L1 while every token passes it.
  for (int64_t i = row_begin; i < row_end; i += kRows) {
    const int64_t rows = std::min<int64_t>(kRows, row_end - i);
    for (int64_t j = token_begin; j < token_end; j += kTokens) {
      const int64_t tokens = std::min<int64_t>(kTokens, token_end - j);
      kTiles.fn[rows - 1][tokens - 1](p, i, j);
    }
  }
}

// 4-bit weights by groups of 8 rows, in the layout of quant_group_layout.h:
// per block, the 8 rows' f16 scales (and minimums), then 4 pieces of 32
// bytes, each 4 bytes of every row. Nibbles of a piece, masked or shifted,
// are 4 columns of the 8 rows; one maddubs with a token's 4 activations,
// broadcast, adds 4 products into each row's lanes, so a block's 8 rows come
// out as the 8 lanes of one vector: scaled by one multiply and stored with
// no horizontal sums. Row-major weights are laid out a group at a time into
// thread-local scratch first (one pass over the group's bytes, shared by
// every token); packed ones (CpuPackedBuffer) are read where they are.
constexpr int kGroupTokens = 4;

struct TokenScales {
  const float* d;      // Per token, per block: d of the activation block.
  const float* s;      // q4_1: its stored s (f16 of d * sum of qs).
  const int32_t* sum;  // q4_0: 8 * sum of its qs.
};

template <class F>
constexpr int64_t kHeaderBytes = F::kMin ? 4 : 2;

// Lays out weight rows [i0, i0 + rows) (rows <= 8; missing rows repeat the
// last one and get zero scales) as the group layout at `out`.
template <class F>
void LayOutGroup(const QuantTileArgs& p, int64_t i0, int rows, std::byte* out) {
  using Block = typename F::Block;
  const int64_t nb = p.k / kQK;
  const Block* w[kGroupRows];
  for (int r = 0; r < kGroupRows; ++r) {
    w[r] = reinterpret_cast<const Block*>(p.w + (i0 + std::min(r, rows - 1)) *
                                                    p.w_row_bytes);
  }
  for (int64_t b = 0; b < nb; ++b) {
    std::byte* o = out + b * kGroupRows * static_cast<int64_t>(sizeof(Block));
    // Rows r and r + 4 share a vector: [r | r + 4], 16 packed bytes each.
    __m256i x[4];
    for (int r = 0; r < 4; ++r) {
      x[r] = _mm256_set_m128i(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[r + 4][b].qs)),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[r][b].qs)));
    }
    // Piece q of rows 0-7: q0 = [0q0 1q0 2q0 3q0 | 4q0 ... 7q0].
    const __m256i t0 = _mm256_unpacklo_epi32(x[0], x[1]);
    const __m256i t1 = _mm256_unpackhi_epi32(x[0], x[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(x[2], x[3]);
    const __m256i t3 = _mm256_unpackhi_epi32(x[2], x[3]);
    auto* v = reinterpret_cast<__m256i*>(o + kHeaderBytes<F> * kGroupRows);
    _mm256_storeu_si256(v + 0, _mm256_unpacklo_epi64(t0, t2));
    _mm256_storeu_si256(v + 1, _mm256_unpackhi_epi64(t0, t2));
    _mm256_storeu_si256(v + 2, _mm256_unpacklo_epi64(t1, t3));
    _mm256_storeu_si256(v + 3, _mm256_unpackhi_epi64(t1, t3));
    uint16_t d[kGroupRows], m[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) {
      d[r] = r < rows ? w[r][b].d : 0;
      if constexpr (F::kMin) m[r] = r < rows ? w[r][b].m : 0;
    }
    std::memcpy(o, d, sizeof(d));
    if constexpr (F::kMin) std::memcpy(o + sizeof(d), m, sizeof(m));
  }
}

inline __m256 HalvesToFloats(const std::byte* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// dst for the group at `group` (rows i0 to i0 + rows, rows <= 8) and tokens
// [j0, j0 + T).
template <class F, int T>
void GroupTile(const QuantTileArgs& p, const std::byte* group,
               const TokenScales& ts, int64_t i0, int rows, int64_t j0,
               int64_t token_begin) {
  using Act = typename F::Act;
  constexpr int64_t kGroupBlockBytes =
      kGroupRows * static_cast<int64_t>(sizeof(typename F::Block));
  const int64_t nb = p.k / kQK;
  const Act* a[T];
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const Act*>(p.act + (j0 + t) * p.act_row_bytes);
  }
  const int64_t ts0 = (j0 - token_begin) * nb;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* o = group + b * kGroupBlockBytes;
    const auto* v =
        reinterpret_cast<const __m256i*>(o + kHeaderBytes<F> * kGroupRows);
    // 16-bit sums of 16 products of <= 15 * 127 each stay below 2^15.
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    for (int q = 0; q < 4; ++q) {
      // Low nibbles are columns 4q..4q+3, high ones 16 + 4q..16 + 4q + 3.
      const __m256i piece = _mm256_loadu_si256(v + q);
      const __m256i lo = _mm256_and_si256(piece, low);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(piece, 4), low);
      for (int t = 0; t < T; ++t) {
        int32_t alo, ahi;
        std::memcpy(&alo, a[t][b].qs + 4 * q, 4);
        std::memcpy(&ahi, a[t][b].qs + 16 + 4 * q, 4);
        isum[t] = _mm256_add_epi16(
            isum[t], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(alo)));
        isum[t] = _mm256_add_epi16(
            isum[t], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(ahi)));
      }
    }
    const __m256 wd = HalvesToFloats(o);
    for (int t = 0; t < T; ++t) {
      __m256i dot = _mm256_madd_epi16(isum[t], ones);
      const int64_t at = ts0 + t * nb + b;
      if constexpr (!F::kMin) {
        // Stored nibbles are w + 8: take 8 * sum(a) back off.
        dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(ts.sum[at]));
      }
      acc[t] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                          _mm256_mul_ps(wd, _mm256_set1_ps(ts.d[at])), acc[t]);
      if constexpr (F::kMin) {
        acc[t] = _mm256_fmadd_ps(HalvesToFloats(o + 2 * kGroupRows),
                                 _mm256_set1_ps(ts.s[at]), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    float* out = p.dst + (j0 + t) * p.ldc + i0;
    if (rows == kGroupRows) {
      _mm256_storeu_ps(out, acc[t]);
    } else {
      alignas(32) float lanes[kGroupRows];
      _mm256_store_ps(lanes, acc[t]);
      std::copy_n(lanes, rows, out);
    }
  }
}

template <class F>
void ComputeGroups(const QuantTileArgs& p, int64_t row_begin, int64_t row_end,
                   int64_t token_begin, int64_t token_end) {
  using Act = typename F::Act;
  const int64_t nb = p.k / kQK;
  const int64_t n = token_end - token_begin;
  // Grown once per thread, then reused.
  thread_local std::vector<std::byte> group;
  thread_local std::vector<float> token_d, token_s;
  thread_local std::vector<int32_t> token_sum;
  if (!p.grouped) group.resize(static_cast<size_t>(p.w_row_bytes * kGroupRows));
  token_d.resize(static_cast<size_t>(n * nb));
  if constexpr (F::kMin) {
    token_s.resize(static_cast<size_t>(n * nb));
  } else {
    token_sum.resize(static_cast<size_t>(n * nb));
  }
  for (int64_t j = 0; j < n; ++j) {
    const Act* a = reinterpret_cast<const Act*>(p.act + (token_begin + j) *
                                                            p.act_row_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      const auto at = static_cast<size_t>(j * nb + b);
      token_d[at] = Half(a[b].d);
      if constexpr (F::kMin) {
        token_s[at] = Half(a[b].s);
      } else {
        // 8 * sum(qs): maddubs pairs, then madd by 8 into 32 bits.
        const __m256i s16 =
            _mm256_maddubs_epi16(_mm256_set1_epi8(1), Load32(a[b].qs));
        const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(8));
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32),
                                  _mm256_extracti128_si256(s32, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
        token_sum[at] = _mm_cvtsi128_si32(s);
      }
    }
  }
  const TokenScales ts{token_d.data(), token_s.data(), token_sum.data()};
  for (int64_t i = row_begin; i < row_end; i += kGroupRows) {
    const int rows =
        static_cast<int>(std::min<int64_t>(kGroupRows, row_end - i));
    const std::byte* g = p.w + i * p.w_row_bytes;  // Packed: i % 8 == 0.
    if (!p.grouped) {
      LayOutGroup<F>(p, i, rows, group.data());
      g = group.data();
    }
    int64_t j = token_begin;
    for (; j + kGroupTokens <= token_end; j += kGroupTokens) {
      GroupTile<F, kGroupTokens>(p, g, ts, i, rows, j, token_begin);
    }
    switch (token_end - j) {
      case 3:
        GroupTile<F, 3>(p, g, ts, i, rows, j, token_begin);
        break;
      case 2:
        GroupTile<F, 2>(p, g, ts, i, rows, j, token_begin);
        break;
      case 1:
        GroupTile<F, 1>(p, g, ts, i, rows, j, token_begin);
        break;
      default:
        break;
    }
  }
}

}  // namespace

QuantTileFn Avx2QuantTile(quant::QuantType weight) {
  switch (weight) {
    case quant::QuantType::kQ4_0:
      return ComputeGroups<Q4_0>;
    case quant::QuantType::kQ4_1:
      return ComputeGroups<Q4_1>;
    case quant::QuantType::kQ8_0:
      return Compute<Q8_0>;
    default:
      return nullptr;
  }
}

}  // namespace cpu_internal
}  // namespace ferry
