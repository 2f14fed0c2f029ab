// AVX2 tiles of iq4_nl (q8_0 activations) and iq4_xs (q8_K) weights, 8
// rows by up to 4 tokens on the group layout (quant_group_tile_avx2.h). A
// piece's nibbles index the iq4 grid with one shuffle for all 8 rows; the
// grid values are signed, so each token's broadcast activations take the
// weights' signs (maddubs multiplies unsigned by signed) and, since a pair of
// products may reach 2 * 127 * 127, every maddubs is widened to 32 bits at
// once: by ones (iq4_nl), or by the rows' sub-block scales (iq4_xs).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "ferry/backends/host/internal/avx2_blocks.h"
#include "ferry/backends/host/internal/quant_group_layout.h"
#include "ferry/backends/host/internal/quant_group_tile_avx2.h"
#include "ferry/backends/host/internal/quant_tile_kernels.h"
#include "ferry/quant/block_formats.h"

namespace ferry {
namespace cpu_internal {
namespace {

using group_avx2::Broadcast4;
using group_avx2::LoadPiece;
using group_avx2::SpreadByte;
using group_avx2::StoreRows;
using host_avx2::AddInOrderEpi32;
using host_avx2::Half;

inline __m256i Grid() {
  return _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIq4NlValues)));
}

// Adds the products of one half (low or high nibbles) of a piece, as grid
// values `w` with |w| in `w_abs`, with each token's activations at
// a[t] + at, multiplied by `mul` (16-bit lanes), to sum[t].
template <int T>
inline void AddSigned(__m256i w, __m256i w_abs, const int8_t* const* a,
                      int64_t at, __m256i mul, __m256i* sum) {
  for (int t = 0; t < T; ++t) {
    const __m256i as = _mm256_sign_epi8(Broadcast4(a[t] + at), w);
    AddInOrderEpi32(sum[t],
                    _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, as), mul));
  }
}

// Adds piece `piece`'s products (its low nibbles' grid values with the
// activations at a[t] + at_low, its high ones' at a[t] + at_low + 16) to
// sum[t], as AddSigned.
template <int T>
inline void AddGridPiece(__m256i piece, __m256i grid, const int8_t* const* a,
                         int64_t at_low, __m256i mul, __m256i* sum) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_shuffle_epi8(grid, _mm256_and_si256(piece, low4));
  const __m256i hi = _mm256_shuffle_epi8(
      grid, _mm256_and_si256(_mm256_srli_epi16(piece, 4), low4));
  AddSigned<T>(lo, _mm256_sign_epi8(lo, lo), a, at_low, mul, sum);
  AddSigned<T>(hi, _mm256_sign_epi8(hi, hi), a, at_low + 16, mul, sum);
}

// iq4_nl: header d, 4 pieces of q4_0-ordered nibbles (piece q: columns 4q..
// low, 16 + 4q.. high).
struct IQ4_NL {
  using Block = quant::BlockIQ4_NL;
  static constexpr int64_t kBlockElements = quant::kQK;
  static constexpr int64_t kHeaderBytes = 2;
  static constexpr int64_t kTrailerBytes = 0;

  template <int T>
  static void Tile(const QuantTileArgs& p, const std::byte* group, int64_t i0,
                   int rows, int64_t j0) {
    using Act = quant::BlockQ8_0;
    const int64_t nb = p.k / kBlockElements;
    const Act* a[T];
    group_avx2::TokenRows<Act, T>(p, j0, a);
    const __m256i grid = Grid();
    const __m256i ones = _mm256_set1_epi16(1);
    constexpr int64_t kGroupBlock = kGroupRows * sizeof(Block);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const std::byte* o = group + b * kGroupBlock;
      const std::byte* pieces = o + 2 * kGroupRows;
      const int8_t* qs[T];
      for (int t = 0; t < T; ++t) qs[t] = a[t][b].qs;
      __m256i dots[T];
      for (int t = 0; t < T; ++t) dots[t] = _mm256_setzero_si256();
      for (int q = 0; q < 4; ++q) {
        AddGridPiece<T>(LoadPiece(pieces, q), grid, qs, 4 * q, ones, dots);
      }
      const __m256 wd =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
      for (int t = 0; t < T; ++t) {
        acc[t] = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(dots[t]),
            _mm256_mul_ps(wd, _mm256_set1_ps(Half(a[t][b].d))), acc[t]);
      }
    }
    StoreRows<T>(p, acc, i0, rows, j0);
  }
};

// iq4_xs: header d and scales_h, piece 0 the 4 bytes scales_l, pieces 1 +
// 4s + q the nibbles of sub-block s as iq4_nl's piece q.
struct IQ4_XS {
  using Block = quant::BlockIQ4_XS;
  static constexpr int64_t kBlockElements = quant::kQK_K;
  static constexpr int64_t kHeaderBytes = 4;
  static constexpr int64_t kTrailerBytes = 0;

  template <int T>
  static void Tile(const QuantTileArgs& p, const std::byte* group, int64_t i0,
                   int rows, int64_t j0) {
    using Act = quant::BlockQ8_K;
    const int64_t nb = p.k / kBlockElements;
    const Act* a[T];
    group_avx2::TokenRows<Act, T>(p, j0, a);
    const __m256i grid = Grid();
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    constexpr int64_t kGroupBlock = kGroupRows * sizeof(Block);
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const std::byte* o = group + b * kGroupBlock;
      const std::byte* pieces = o + 4 * kGroupRows;
      group_avx2::PrefetchBlock(o + kGroupBlock, kGroupBlock);
      // Sub-block s's 6-bit scale: nibble s % 2 of scales_l[s / 2] (its
      // low 4 bits), bits 2s, 2s + 1 of scales_h (its top 2); minus 32.
      const __m256i scales_h = _mm256_cvtepu16_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 16)));
      const __m256i scales_l = LoadPiece(pieces, 0);
      const __m256i nibbles[2] = {
          _mm256_and_si256(scales_l, low4),
          _mm256_and_si256(_mm256_srli_epi16(scales_l, 4), low4)};
      const int8_t* qs[T];
      for (int t = 0; t < T; ++t) qs[t] = a[t][b].qs;
      __m256i isum[T];
      for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        __m256i top = _mm256_slli_epi32(
            _mm256_and_si256(_mm256_srli_epi32(scales_h, 2 * s),
                             _mm256_set1_epi32(3)),
            4);
        top = _mm256_or_si256(top, _mm256_slli_epi32(top, 16));
        const __m256i scale = _mm256_sub_epi16(
            _mm256_or_si256(SpreadByte(nibbles[s % 2], s / 2), top),
            _mm256_set1_epi16(32));
        for (int q = 0; q < 4; ++q) {
          AddGridPiece<T>(LoadPiece(pieces, 1 + 4 * s + q), grid, qs,
                          32 * s + 4 * q, scale, isum);
        }
      }
      const __m256 d =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
      for (int t = 0; t < T; ++t) {
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]),
                                 _mm256_mul_ps(d, _mm256_set1_ps(a[t][b].d)),
                                 acc[t]);
      }
    }
    StoreRows<T>(p, acc, i0, rows, j0);
  }
};

}  // namespace

QuantTileFn Avx2Iq4QuantTile(quant::QuantType weight) {
  switch (weight) {
    case quant::QuantType::kIQ4_NL:
      return group_avx2::ComputeGroups<IQ4_NL>;
    case quant::QuantType::kIQ4_XS:
      return group_avx2::ComputeGroups<IQ4_XS>;
    default:
      return nullptr;
  }
}

}  // namespace cpu_internal
}  // namespace ferry
