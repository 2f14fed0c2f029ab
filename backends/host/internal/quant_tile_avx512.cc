// AVX-512 tiles of q4_0, q4_1, q5_0, q5_1 and q8_0 weights (compiled with
// -mavx512f -mavx512bw -mavx512vl -mfma -mf16c, and for tests on SIMDe:
// avx512_intrinsics.h): 16 rows (two groups, quant_group_tile_avx512.h) by
// up to 4 tokens, quant_tile_avx2.cc's arithmetic on registers twice as wide.
// A 512-bit piece is 4 columns of 16 rows: per piece and token one maddubs
// and one add (q4, q5) cover 64 products where AVX2 needs two of each, and
// the nibble (and fifth-bit) decode of a piece serves 16 rows; q8_0's
// weights give their signs to each token's activations by a masked negation
// (no sign_epi8 in AVX-512), the mask and |w| once per piece.
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() values, which
// -Wuninitialized flags once inlined (GCC PR105593); they are set before use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ferry/backends/host/internal/avx512_intrinsics.h"
#include "ferry/backends/host/internal/quant_group_layout.h"
#include "ferry/backends/host/internal/quant_group_tile_avx512.h"
#include "ferry/backends/host/internal/quant_tile_kernels.h"
#include "ferry/backends/host/internal/quant_tile_row_major.h"
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
using group_avx512::PrefetchBlock;
using group_avx512::ShuffleLanes;
using group_avx512::StoreRows;
using quant::kQK;

inline float Half(uint16_t bits) { return _cvtsh_ss(bits); }

// Weight formats, as quant_tile_avx2.cc's. kNibbles: 16 bytes of 4-bit
// values per block, unsigned, with (kFifthBit) a fifth bit each from 4
// bytes qh (the group's piece 0); stored as w + kOffset (q4_0, q5_0) or w
// (q4_1, q5_1, which add a minimum). Else 32 signed bytes (q8_0).
template <class B, class A, DType kD, bool kM, bool kN, bool kF, int kO>
struct Format {
  using Block = B;
  using Act = A;
  static constexpr DType kDType = kD;
  static constexpr int64_t kBlockElements = kQK;
  static constexpr bool kMin = kM;
  static constexpr bool kNibbles = kN;
  static constexpr bool kFifthBit = kF;
  static constexpr int kOffset = kO;
  static constexpr int64_t kHeaderBytes = kM ? 4 : 2;
};
using Q4_0 = Format<quant::BlockQ4_0, quant::BlockQ8_0, DType::kQ4_0, false,
                    true, false, 8>;
using Q4_1 = Format<quant::BlockQ4_1, quant::BlockQ8_1, DType::kQ4_1, true,
                    true, false, 0>;
using Q5_0 = Format<quant::BlockQ5_0, quant::BlockQ8_0, DType::kQ5_0, false,
                    true, true, 16>;
using Q5_1 = Format<quant::BlockQ5_1, quant::BlockQ8_1, DType::kQ5_1, true,
                    true, true, 0>;
using Q8_0 = Format<quant::BlockQ8_0, quant::BlockQ8_0, DType::kQ8_0, false,
                    false, false, 0>;

template <class F>
constexpr int64_t kGroupBlockBytes = group_avx512::kGroupBlockBytes<F>;

struct TokenScales {
  const float* d;      // Per token, per block: d of the activation block.
  const float* s;      // q4_1, q5_1: its stored s (f16 of d * sum of qs).
  const int32_t* sum;  // q4_0, q5_0: kOffset * sum of its qs.
};

// The fifth bits of piece q's low (kHigh: high) nibbles as 0 or 16 per
// byte, from the rows' qh dwords (quant_tile_avx2.cc's FifthBits, per
// 128-bit lane): column c = 4q + j (or 16 + 4q + j) has bit c of its row's
// dword; its qh byte is copied into each byte of the row's dword and masked
// with bit 4 + j there (the dword shifted left by 4 first where the bits
// sit low, q even); min with 16 turns any set bit into 16.
template <int q, bool kHigh>
inline __m512i FifthBits(__m512i qh, __m512i qh4) {
  constexpr char i = (kHigh ? 2 : 0) + q / 2;
  const __m512i bytes = ShuffleLanes(
      q % 2 == 0 ? qh4 : qh,
      _mm_setr_epi8(i, i, i, i, 4 + i, 4 + i, 4 + i, 4 + i, 8 + i, 8 + i, 8 + i,
                    8 + i, 12 + i, 12 + i, 12 + i, 12 + i));
  const __m512i bit =
      _mm512_and_si512(bytes, _mm512_set1_epi32(static_cast<int>(0x80402010)));
  return _mm512_min_epu8(bit, _mm512_set1_epi8(16));
}

// Adds the products of piece q's columns (nibbles with their fifth bits)
// with each token's activations to its 16-bit sums.
template <class F, int T, int q>
inline void AddPiece(Groups v, __m512i qh, __m512i qh4,
                     const typename F::Act* const* a, int64_t b,
                     __m512i* isum) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  // Low nibbles are columns 4q..4q+3, high ones 16 + 4q..16 + 4q + 3.
  const __m512i piece = LoadPiece(v, q);
  __m512i lo = _mm512_and_si512(piece, low);
  __m512i hi = _mm512_and_si512(_mm512_srli_epi16(piece, 4), low);
  if constexpr (F::kFifthBit) {
    const __m512i lo5 = FifthBits<q, false>(qh, qh4);
    const __m512i hi5 = FifthBits<q, true>(qh, qh4);
    lo = _mm512_or_si512(lo, lo5);
    hi = _mm512_or_si512(hi, hi5);
  }
  for (int t = 0; t < T; ++t) {
    isum[t] = _mm512_add_epi16(
        isum[t], _mm512_maddubs_epi16(lo, Broadcast4(a[t][b].qs + 4 * q)));
    isum[t] = _mm512_add_epi16(
        isum[t], _mm512_maddubs_epi16(hi, Broadcast4(a[t][b].qs + 16 + 4 * q)));
  }
}

// The 16 rows' integer dots of block `b` with token activations a[t][b],
// as 32-bit lanes.
template <class F, int T>
void BlockDots(Groups o, const typename F::Act* const* a, int64_t b,
               __m512i* dots) {
  Groups v = o + F::kHeaderBytes * kGroupRows;
  const __m512i ones = _mm512_set1_epi16(1);
  if constexpr (F::kNibbles) {
    __m512i qh = _mm512_setzero_si512(), qh4 = qh;
    if constexpr (F::kFifthBit) {
      qh = LoadPiece(v, 0);
      qh4 = _mm512_slli_epi32(qh, 4);
      v = v + 32;
    }
    // 16-bit sums: 16 products of <= 15 * 127 each stay below 2^15, but
    // only 8 of <= 31 * 127 (q5), so q5 widens to 32 bits every 2 pieces.
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    AddPiece<F, T, 0>(v, qh, qh4, a, b, isum);
    AddPiece<F, T, 1>(v, qh, qh4, a, b, isum);
    if constexpr (F::kFifthBit) {
      for (int t = 0; t < T; ++t) {
        dots[t] = _mm512_madd_epi16(isum[t], ones);
        isum[t] = _mm512_setzero_si512();
      }
    }
    AddPiece<F, T, 2>(v, qh, qh4, a, b, isum);
    AddPiece<F, T, 3>(v, qh, qh4, a, b, isum);
    for (int t = 0; t < T; ++t) {
      const __m512i d = _mm512_madd_epi16(isum[t], ones);
      if constexpr (F::kFifthBit) {
        dots[t] = _mm512_add_epi32(dots[t], d);
      } else {
        dots[t] = d;
      }
    }
  } else {
    // A pair of products of <= 128 * 127 fits 16 bits; two do not.
    for (int t = 0; t < T; ++t) dots[t] = _mm512_setzero_si512();
    for (int q = 0; q < 8; ++q) {
      const __m512i w = LoadPiece(v, q);
      const __m512i w_abs = _mm512_abs_epi8(w);
      const __mmask64 negative = _mm512_movepi8_mask(w);
      for (int t = 0; t < T; ++t) {
        const __m512i x = Broadcast4(a[t][b].qs + 4 * q);
        const __m512i as =
            _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x);
        dots[t] = _mm512_add_epi32(
            dots[t], _mm512_madd_epi16(_mm512_maddubs_epi16(w_abs, as), ones));
      }
    }
  }
}

// dst for the tile's 16 rows at `group` (rows i0 to i0 + rows) and tokens
// [j0, j0 + T).
template <class F, int T>
void GroupTile(const QuantTileArgs& p, Groups group, const TokenScales& ts,
               int64_t i0, int rows, int64_t j0, int64_t token_begin) {
  using Act = typename F::Act;
  const int64_t nb = p.k / kQK;
  const Act* a[T];
  group_avx512::TokenRows<Act, T>(p, j0, a);
  const int64_t ts0 = (j0 - token_begin) * nb;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Groups o = group + b * kGroupBlockBytes<F>;
    if (T == 1) {
      PrefetchBlock(o + 2 * kGroupBlockBytes<F>, kGroupBlockBytes<F>);
    }
    __m512i dots[T];
    BlockDots<F, T>(o, a, b, dots);
    const __m512 wd = HalvesToFloats(o);
    for (int t = 0; t < T; ++t) {
      const int64_t at = ts0 + t * nb + b;
      if constexpr (F::kOffset != 0) {
        // Stored values are w + kOffset: take kOffset * sum(a) back off.
        dots[t] = _mm512_sub_epi32(dots[t], _mm512_set1_epi32(ts.sum[at]));
      }
      acc[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots[t]),
                          _mm512_mul_ps(wd, _mm512_set1_ps(ts.d[at])), acc[t]);
      if constexpr (F::kMin) {
        acc[t] = _mm512_fmadd_ps(HalvesToFloats(o + 2 * kGroupRows),
                                 _mm512_set1_ps(ts.s[at]), acc[t]);
      }
    }
  }
  StoreRows<T>(p, acc, i0, rows, j0);
}

// As group_avx512::ComputeGroups, with each token's block scales (and
// offset sums) read once for all rows first.
template <class F>
void ComputeGroups(const QuantTileArgs& p, int64_t row_begin, int64_t row_end,
                   int64_t token_begin, int64_t token_end) {
  using Act = typename F::Act;
  constexpr int64_t kTileRows = group_avx512::kTileRows;
  constexpr int kTokens = group_avx512::kGroupTokens;
  const int64_t nb = p.k / kQK;
  const int64_t n = token_end - token_begin;
  static_assert(sizeof(float) == sizeof(int32_t));
  auto* token_d = reinterpret_cast<float*>(
      TileTokenScratch(static_cast<size_t>(3 * n * nb) * sizeof(float)));
  float* token_s = token_d + n * nb;
  auto* token_sum = reinterpret_cast<int32_t*>(token_s + n * nb);
  for (int64_t j = 0; j < n; ++j) {
    const Act* a = reinterpret_cast<const Act*>(p.act + (token_begin + j) *
                                                            p.act_row_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t at = j * nb + b;
      token_d[at] = Half(a[b].d);
      if constexpr (F::kMin) token_s[at] = Half(a[b].s);
      if constexpr (F::kOffset != 0) {
        int32_t sum = 0;
        for (int l = 0; l < kQK; ++l) sum += a[b].qs[l];
        token_sum[at] = F::kOffset * sum;
      }
    }
  }
  const TokenScales ts{token_d, token_s, token_sum};
  for (int64_t i = row_begin; i < row_end; i += kTileRows) {
    const int rows =
        static_cast<int>(row_end - i < kTileRows ? row_end - i : kTileRows);
    // Packed: i % 8 == 0, and groups are 8 rows of bytes apart.
    const std::byte* lo = p.grouped
                              ? p.w + i * p.w_row_bytes
                              : LayOutRowMajorGroups(p, F::kDType, i, rows);
    const int64_t group_bytes =
        p.grouped ? kGroupRows * p.w_row_bytes : nb * kGroupBlockBytes<F>;
    const Groups g{lo, rows > kGroupRows ? lo + group_bytes : lo};
    int64_t j = token_begin;
    for (; j + kTokens <= token_end; j += kTokens) {
      GroupTile<F, kTokens>(p, g, ts, i, rows, j, token_begin);
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

QuantTileFn Avx512QuantTile(quant::QuantType weight) {
  switch (weight) {
    case quant::QuantType::kQ4_0:
      return ComputeGroups<Q4_0>;
    case quant::QuantType::kQ4_1:
      return ComputeGroups<Q4_1>;
    case quant::QuantType::kQ5_0:
      return ComputeGroups<Q5_0>;
    case quant::QuantType::kQ5_1:
      return ComputeGroups<Q5_1>;
    case quant::QuantType::kQ8_0:
      return ComputeGroups<Q8_0>;
    default:
      return nullptr;
  }
}

FERRY_AVX512_END
}  // namespace cpu_internal
}  // namespace ferry
