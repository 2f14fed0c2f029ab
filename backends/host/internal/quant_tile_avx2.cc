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
#include <utility>

#include "ferry/backends/host/internal/avx2_blocks.h"
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

}  // namespace

QuantTileFn Avx2QuantTile(quant::QuantType weight) {
  switch (weight) {
    case quant::QuantType::kQ4_0:
      return Compute<Q4_0>;
    case quant::QuantType::kQ4_1:
      return Compute<Q4_1>;
    case quant::QuantType::kQ8_0:
      return Compute<Q8_0>;
    default:
      return nullptr;
  }
}

}  // namespace cpu_internal
}  // namespace ferry
