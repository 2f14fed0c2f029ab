// AVX-512 tiles of iq4_nl (q8_0 activations) and iq4_xs (q8_K) weights
// (compiled with -mavx512f -mavx512bw -mavx512vl -mfma -mf16c, and for tests
// on SIMDe: avx512_intrinsics.h): 16 rows (two groups,
// quant_group_tile_avx512.h) by up to 4 tokens, as quant_iq4_tile_avx2.cc
// does 8: a piece's nibbles index the grid with one shuffle for all 16 rows,
// and each token's broadcast activations take the weights' signs (a masked
// negation: AVX-512 has no sign_epi8) before maddubs, every maddubs widened
// to 32 bits at once by ones (iq4_nl) or the rows' sub-block scales (iq4_xs).
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() values, which
// -Wuninitialized flags once inlined (GCC PR105593); they are set before use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cstddef>
#include <cstdint>

#include "ferry/backends/host/internal/avx512_intrinsics.h"
#include "ferry/backends/host/internal/quant_group_layout.h"
#include "ferry/backends/host/internal/quant_group_tile_avx512.h"
#include "ferry/backends/host/internal/quant_tile_kernels.h"
#include "ferry/graph/dtype.h"
#include "ferry/quant/block_formats.h"

namespace ferry {
namespace cpu_internal {
FERRY_AVX512_BEGIN
namespace {

using group_avx512::Broadcast4;
using group_avx512::Groups;
using group_avx512::HalvesToFloats;
using group_avx512::LoadPiece;
using group_avx512::SpreadByte;
using group_avx512::StoreRows;

// The 16 rows' 16-bit field at `g` (8 of each group, side by side).
inline __m256i Words(Groups g) {
  return _mm256_inserti128_si256(
      _mm256_castsi128_si256(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(g.lo))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(g.hi)), 1);
}

inline float Half(uint16_t bits) { return _cvtsh_ss(bits); }

// The 16 iq4 grid values in each 128-bit lane.
inline __m512i Grid() {
  return _mm512_broadcast_i32x4(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIq4NlValues)));
}

// Adds the products of one half (low or high nibbles) of a piece, as grid
// values `w`, with each token's activations at a[t] + at, multiplied by
// `mul` (16-bit lanes), to sum[t]. AVX-512 has no sign_epi8: each token's
// activations are negated under the mask of negative weights instead.
template <int T>
inline void AddSigned(__m512i w, const int8_t* const* a, int64_t at,
                      __m512i mul, __m512i* sum) {
  const __m512i w_abs = _mm512_abs_epi8(w);
  const __mmask64 negative = _mm512_movepi8_mask(w);
  for (int t = 0; t < T; ++t) {
    const __m512i x = Broadcast4(a[t] + at);
    const __m512i as =
        _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x);
    sum[t] = _mm512_add_epi32(
        sum[t], _mm512_madd_epi16(_mm512_maddubs_epi16(w_abs, as), mul));
  }
}

// Adds piece `piece`'s products (its low nibbles' grid values with the
// activations at a[t] + at_low, its high ones' at a[t] + at_low + 16) to
// sum[t], as AddSigned.
template <int T>
inline void AddGridPiece(__m512i piece, __m512i grid, const int8_t* const* a,
                         int64_t at_low, __m512i mul, __m512i* sum) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i lo = _mm512_shuffle_epi8(grid, _mm512_and_si512(piece, low4));
  const __m512i hi = _mm512_shuffle_epi8(
      grid, _mm512_and_si512(_mm512_srli_epi16(piece, 4), low4));
  AddSigned<T>(lo, a, at_low, mul, sum);
  AddSigned<T>(hi, a, at_low + 16, mul, sum);
}

// iq4_nl: header d, 4 pieces of q4_0-ordered nibbles (piece q: columns 4q..
// low, 16 + 4q.. high).
struct IQ4_NL {
  using Block = quant::BlockIQ4_NL;
  static constexpr DType kDType = DType::kIQ4_NL;
  static constexpr int64_t kBlockElements = quant::kQK;
  static constexpr int64_t kHeaderBytes = 2;
  static constexpr int64_t kTrailerBytes = 0;

  template <int T>
  static void Tile(const QuantTileArgs& p, Groups group, int64_t i0, int rows,
                   int64_t j0) {
    using Act = quant::BlockQ8_0;
    const int64_t nb = p.k / kBlockElements;
    const Act* a[T];
    group_avx512::TokenRows<Act, T>(p, j0, a);
    const __m512i grid = Grid();
    const __m512i ones = _mm512_set1_epi16(1);
    constexpr int64_t kGroupBlock = kGroupRows * sizeof(Block);
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const Groups o = group + b * kGroupBlock;
      const Groups pieces = o + 2 * kGroupRows;
      const int8_t* qs[T];
      for (int t = 0; t < T; ++t) qs[t] = a[t][b].qs;
      __m512i dots[T];
      for (int t = 0; t < T; ++t) dots[t] = _mm512_setzero_si512();
      for (int q = 0; q < 4; ++q) {
        AddGridPiece<T>(LoadPiece(pieces, q), grid, qs, 4 * q, ones, dots);
      }
      const __m512 wd = HalvesToFloats(o);
      for (int t = 0; t < T; ++t) {
        acc[t] = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(dots[t]),
            _mm512_mul_ps(wd, _mm512_set1_ps(Half(a[t][b].d))), acc[t]);
      }
    }
    StoreRows<T>(p, acc, i0, rows, j0);
  }
};

// iq4_xs: header d and scales_h, piece 0 the 4 bytes scales_l, pieces 1 +
// 4s + q the nibbles of sub-block s as iq4_nl's piece q.
struct IQ4_XS {
  using Block = quant::BlockIQ4_XS;
  static constexpr DType kDType = DType::kIQ4_XS;
  static constexpr int64_t kBlockElements = quant::kQK_K;
  static constexpr int64_t kHeaderBytes = 4;
  static constexpr int64_t kTrailerBytes = 0;

  template <int T>
  static void Tile(const QuantTileArgs& p, Groups group, int64_t i0, int rows,
                   int64_t j0) {
    using Act = quant::BlockQ8_K;
    const int64_t nb = p.k / kBlockElements;
    const Act* a[T];
    group_avx512::TokenRows<Act, T>(p, j0, a);
    const __m512i grid = Grid();
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    constexpr int64_t kGroupBlock = kGroupRows * sizeof(Block);
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const Groups o = group + b * kGroupBlock;
      const Groups pieces = o + 4 * kGroupRows;
      group_avx512::PrefetchBlock(o + kGroupBlock, kGroupBlock);
      // Sub-block s's 6-bit scale: nibble s % 2 of scales_l[s / 2] (its
      // low 4 bits), bits 2s, 2s + 1 of scales_h (its top 2); minus 32.
      const __m512i scales_h = _mm512_cvtepu16_epi32(Words(o + 16));
      const __m512i scales_l = LoadPiece(pieces, 0);
      const __m512i nibbles[2] = {
          _mm512_and_si512(scales_l, low4),
          _mm512_and_si512(_mm512_srli_epi16(scales_l, 4), low4)};
      const int8_t* qs[T];
      for (int t = 0; t < T; ++t) qs[t] = a[t][b].qs;
      __m512i isum[T];
      for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
      for (int s = 0; s < 8; ++s) {
        __m512i top = _mm512_slli_epi32(
            _mm512_and_si512(_mm512_srli_epi32(scales_h, 2 * s),
                             _mm512_set1_epi32(3)),
            4);
        top = _mm512_or_si512(top, _mm512_slli_epi32(top, 16));
        const __m512i scale = _mm512_sub_epi16(
            _mm512_or_si512(SpreadByte(nibbles[s % 2], s / 2), top),
            _mm512_set1_epi16(32));
        for (int q = 0; q < 4; ++q) {
          AddGridPiece<T>(LoadPiece(pieces, 1 + 4 * s + q), grid, qs,
                          32 * s + 4 * q, scale, isum);
        }
      }
      const __m512 d = HalvesToFloats(o);
      for (int t = 0; t < T; ++t) {
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]),
                                 _mm512_mul_ps(d, _mm512_set1_ps(a[t][b].d)),
                                 acc[t]);
      }
    }
    StoreRows<T>(p, acc, i0, rows, j0);
  }
};

}  // namespace

QuantTileFn Avx512Iq4QuantTile(quant::QuantType weight) {
  switch (weight) {
    case quant::QuantType::kIQ4_NL:
      return group_avx512::ComputeGroups<IQ4_NL>;
    case quant::QuantType::kIQ4_XS:
      return group_avx512::ComputeGroups<IQ4_XS>;
    default:
      return nullptr;
  }
}

FERRY_AVX512_END
}  // namespace cpu_internal
}  // namespace ferry
