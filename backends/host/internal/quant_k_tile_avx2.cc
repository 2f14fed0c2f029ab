// AVX2 tiles of q2_K, q3_K, q4_K, q5_K and q6_K weights (compiled with -mavx2
// -mfma -mf16c): 8 rows by up to 4 tokens of q8_K activations, on weights in
// groups of 8 rows (quant_group_layout.h: per super-block the 8 rows' f16
// fields, then pieces of 32 bytes, each 4 bytes of every row). As in
// quant_tile_avx2.cc a piece is 4 columns of the 8 rows, one maddubs with a
// token's 4 activations broadcast adds products into each row's lanes, and the
// 8 rows come out as the 8 lanes of one vector. What K-quants add: each
// sub-block's 16-bit sums are multiplied by its rows' integer scales with one
// madd (the scales, one byte per row in a piece, shuffled into 16-bit lanes
// once per super-block for every token), and minimums (q2_K, q4_K, q5_K) and
// the offsets of q3_K (4) and q6_K (32) go through the activation's per-16 sums
// (bsums) once per super-block. Each super-block asks for the next one to be
// prefetched: the tiles read its pieces out of order, and with one token
// (decode) a miss has little work to hide behind (q6_K on SmolLM2's Q6_K
// decode: 14.5% of the samples without, 7.6% with, against vec_dot's 9.1%).
// Row-major weights are laid out a group at a time into
// thread-local scratch first (a transpose of 8 x 8 dwords per 32 bytes of each
// row).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ferry/backends/host/internal/avx2_blocks.h"
#include "ferry/backends/host/internal/quant_group_layout.h"
#include "ferry/backends/host/internal/quant_group_tile_avx2.h"
#include "ferry/backends/host/internal/quant_tile_kernels.h"
#include "ferry/quant/block_formats.h"

namespace ferry {
namespace cpu_internal {
namespace {

using quant::BlockQ8_K;
using quant::kQK_K;

using group_avx2::Broadcast4;
using group_avx2::LoadPiece;
using group_avx2::PairBytes;
using group_avx2::PairSignedBytes;
using group_avx2::PrefetchBlock;
using group_avx2::SpreadByte;
using group_avx2::StoreRows;
using group_avx2::TokenRows;
using host_avx2::AddInOrderEpi16;
using host_avx2::AddInOrderEpi32;

// Sum over the 16 sub-blocks of a super-block of a per-sub-block weight
// factor times the activations' bsum: pairs[v] holds sub-blocks 2v and
// 2v + 1 as 16-bit pairs in each row's lanes.
inline __m256i PairsTimesBsums(const __m256i* pairs, const BlockQ8_K& a) {
  __m256i sum = _mm256_setzero_si256();
  for (int v = 0; v < 8; ++v) {
    int32_t bs;
    std::memcpy(&bs, a.bsums + 2 * v, 4);
    sum = _mm256_add_epi32(sum,
                           _mm256_madd_epi16(pairs[v], _mm256_set1_epi32(bs)));
  }
  return sum;
}

// q4_K (kFifthBit false) and q5_K: pieces 0-2 hold the 12 scale bytes,
// then (q5_K) 8 pieces of qh, piece l with the fifth bits of columns 4l..
// of every sub-block (bit s for sub-block s), then the nibbles: piece 8c + l
// of them holds columns 64c + 4l.. (low) and 64c + 32 + 4l.. (high),
// sub-blocks 2c and 2c + 1.
template <bool kFifthBit, int T>
void GroupTileScaleMin(const QuantTileArgs& p, const std::byte* group,
                       int64_t i0, int rows, int64_t j0) {
  using Block =
      std::conditional_t<kFifthBit, quant::BlockQ5_K, quant::BlockQ4_K>;
  constexpr int kNibblePieces = kFifthBit ? 11 : 3;
  const int64_t nb = p.k / kQK_K;
  const BlockQ8_K* a[T];
  TokenRows<BlockQ8_K, T>(p, j0, a);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i low6 = _mm256_set1_epi8(0x3F);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    constexpr int64_t kGroupBlock = kGroupRows * sizeof(Block);
    const std::byte* o = group + b * kGroupBlock;
    const std::byte* pieces = o + 4 * kGroupRows;
    PrefetchBlock(o + kGroupBlock, kGroupBlock);
    // The 6-bit scales and minimums of sub-blocks 0-3 (lo) and 4-7 (hi),
    // 4 bytes per row: scale j < 4 is the low 6 bits of byte j, minimum j of
    // byte 4 + j; j >= 4 take bytes 8 + (j - 4) for their low 4 bits and the
    // top 2 bits of bytes j - 4 (scales) and j (minimums).
    const __m256i p0 = LoadPiece(pieces, 0);
    const __m256i p1 = LoadPiece(pieces, 1);
    const __m256i p2 = LoadPiece(pieces, 2);
    const __m256i sc_lo = _mm256_and_si256(p0, low6);
    const __m256i m_lo = _mm256_and_si256(p1, low6);
    const __m256i sc_hi =
        _mm256_or_si256(_mm256_and_si256(p2, low4),
                        _mm256_and_si256(_mm256_srli_epi16(p0, 2), bits45));
    const __m256i m_hi =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(p2, 4), low4),
                        _mm256_and_si256(_mm256_srli_epi16(p1, 2), bits45));
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    for (int s = 0; s < 8; ++s) {
      const int c = s / 2;
      const bool high = s % 2 == 1;
      const __m256i scale = SpreadByte(s < 4 ? sc_lo : sc_hi, s % 4);
      // 16 products of <= 15 * 128 per 16-bit lane stay below 2^15, but
      // only 8 of <= 31 * 128 (q5_K), which widens every 4 pieces.
      constexpr int kRun = kFifthBit ? 4 : 8;
      for (int l0 = 0; l0 < 8; l0 += kRun) {
        __m256i i16[T];
        for (int t = 0; t < T; ++t) i16[t] = _mm256_setzero_si256();
        for (int l = l0; l < l0 + kRun; ++l) {
          const __m256i piece = LoadPiece(pieces, kNibblePieces + 8 * c + l);
          __m256i w = _mm256_and_si256(
              high ? _mm256_srli_epi16(piece, 4) : piece, low4);
          if constexpr (kFifthBit) {
            // Bit s of each qh byte moved to bit 4.
            const __m256i qh = LoadPiece(pieces, 3 + l);
            const __m256i bit = s <= 4 ? _mm256_slli_epi16(qh, 4 - s)
                                       : _mm256_srli_epi16(qh, s - 4);
            w = _mm256_or_si256(w,
                                _mm256_and_si256(bit, _mm256_set1_epi8(0x10)));
          }
          for (int t = 0; t < T; ++t) {
            AddInOrderEpi16(i16[t],
                            _mm256_maddubs_epi16(
                                w, Broadcast4(a[t][b].qs + 32 * s + 4 * l)));
          }
        }
        for (int t = 0; t < T; ++t) {
          AddInOrderEpi32(isum[t], _mm256_madd_epi16(i16[t], scale));
        }
      }
    }
    // Minimums of sub-blocks 2q and 2q + 1 against the activation's sums
    // over them (two bsums each), as 16-bit pairs.
    const __m256i mins[4] = {PairBytes(m_lo, 0, 1), PairBytes(m_lo, 2, 3),
                             PairBytes(m_hi, 0, 1), PairBytes(m_hi, 2, 3)};
    const __m256 d =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
    const __m256 dmin = _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 16)));
    for (int t = 0; t < T; ++t) {
      const __m128i bs0 =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[t][b].bsums));
      const __m128i bs1 =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[t][b].bsums + 8));
      const __m128i sums = _mm_hadd_epi16(bs0, bs1);  // Per sub-block.
      __m256i msum = _mm256_madd_epi16(
          mins[0], _mm256_set1_epi32(_mm_extract_epi32(sums, 0)));
      msum = _mm256_add_epi32(
          msum, _mm256_madd_epi16(
                    mins[1], _mm256_set1_epi32(_mm_extract_epi32(sums, 1))));
      msum = _mm256_add_epi32(
          msum, _mm256_madd_epi16(
                    mins[2], _mm256_set1_epi32(_mm_extract_epi32(sums, 2))));
      msum = _mm256_add_epi32(
          msum, _mm256_madd_epi16(
                    mins[3], _mm256_set1_epi32(_mm_extract_epi32(sums, 3))));
      const __m256 da = _mm256_set1_ps(a[t][b].d);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]),
                               _mm256_mul_ps(d, da), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum),
                                _mm256_mul_ps(dmin, da), acc[t]);
    }
  }
  StoreRows<T>(p, acc, i0, rows, j0);
}

// q6_K: pieces 16h + l and 16h + 8 + l hold the low nibbles (ql), 32 + 8h +
// l the 2 high bits (qh) of columns 128h + 32g + 4l.. for g = 0..3 (g even
// from the first piece, odd from the second; low nibbles for g < 2), and 48
// + j the int8 scales of sub-blocks 4j..4j + 3. Values are stored + 32.
template <int T>
void GroupTileQ6_K(const QuantTileArgs& p, const std::byte* group, int64_t i0,
                   int rows, int64_t j0) {
  const int64_t nb = p.k / kQK_K;
  const BlockQ8_K* a[T];
  TokenRows<BlockQ8_K, T>(p, j0, a);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    constexpr int64_t kGroupBlock = kGroupRows * sizeof(quant::BlockQ6_K);
    const std::byte* o = group + b * kGroupBlock;
    const std::byte* pieces = o + 2 * kGroupRows;
    PrefetchBlock(o + kGroupBlock, kGroupBlock);
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    // Each sub-block's scale in the 16-bit lanes of its rows' dwords.
    __m256i scales[16];
    for (int s = 0; s < 16; ++s) {
      scales[s] = PairSignedBytes(LoadPiece(pieces, 48 + s / 4), s % 4, s % 4);
    }
    // Columns 4l.. of pieces 16h + l, 16h + 8 + l and 32 + 8h + l (for l
    // = 2u, 2u + 1) give all 4 g of them: each piece is read once.
    for (int h = 0; h < 2; ++h) {
      for (int u = 0; u < 4; ++u) {
        for (int g = 0; g < 4; ++g) {
          __m256i q[2];
          for (int e = 0; e < 2; ++e) {
            const int l = 2 * u + e;
            const __m256i ql = LoadPiece(pieces, 16 * h + 8 * (g % 2) + l);
            const __m256i qh = LoadPiece(pieces, 32 + 8 * h + l);
            const __m256i low =
                _mm256_and_si256(g < 2 ? ql : _mm256_srli_epi16(ql, 4), low4);
            // Bits 2g, 2g + 1 of qh moved to 4, 5.
            const __m256i hi = g == 0   ? _mm256_slli_epi16(qh, 4)
                               : g == 1 ? _mm256_slli_epi16(qh, 2)
                               : g == 2 ? qh
                                        : _mm256_srli_epi16(qh, 2);
            q[e] = _mm256_or_si256(low, _mm256_and_si256(hi, bits45));
          }
          const __m256i scale = scales[8 * h + 2 * g + u / 2];
          const int at = 128 * h + 32 * g + 8 * u;
          for (int t = 0; t < T; ++t) {
            // Two pair sums of <= 63 * 128 each per 16-bit lane: < 2^15.
            const __m256i x = _mm256_add_epi16(
                _mm256_maddubs_epi16(q[0], Broadcast4(a[t][b].qs + at)),
                _mm256_maddubs_epi16(q[1], Broadcast4(a[t][b].qs + at + 4)));
            AddInOrderEpi32(isum[t], _mm256_madd_epi16(x, scale));
          }
        }
      }
    }
    // The offset: 32 * sum over sub-blocks of scale * bsum, with the scales
    // of sub-blocks 2u and 2u + 1 as 16-bit pairs.
    __m256i pairs[8];
    for (int u = 0; u < 8; ++u) {
      pairs[u] = PairSignedBytes(LoadPiece(pieces, 48 + u / 2), 2 * (u % 2),
                                 2 * (u % 2) + 1);
    }
    const __m256 d =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
    for (int t = 0; t < T; ++t) {
      const __m256i offset = PairsTimesBsums(pairs, a[t][b]);
      const __m256i dot =
          _mm256_sub_epi32(isum[t], _mm256_slli_epi32(offset, 5));
      acc[t] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                          _mm256_mul_ps(d, _mm256_set1_ps(a[t][b].d)), acc[t]);
    }
  }
  StoreRows<T>(p, acc, i0, rows, j0);
}

// q3_K: pieces 0-7 hold hmask, 8 + 8h + l the 2-bit values (qs) of columns
// 128h + 32g + 4l.. for g = 0..3 (bits 2g, 2g + 1; their high bit, worth 4,
// is bit 4h + g of hmask piece l), 24-26 the 12 bytes of packed 6-bit
// scales. Values are stored + 4, scales + 32.
template <int T>
void GroupTileQ3_K(const QuantTileArgs& p, const std::byte* group, int64_t i0,
                   int rows, int64_t j0) {
  const int64_t nb = p.k / kQK_K;
  const BlockQ8_K* a[T];
  TokenRows<BlockQ8_K, T>(p, j0, a);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i low2 = _mm256_set1_epi8(3);
  const __m256i bit2 = _mm256_set1_epi8(4);
  const __m256i offset32 = _mm256_set1_epi16(32);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    constexpr int64_t kGroupBlock = kGroupRows * sizeof(quant::BlockQ3_K);
    const std::byte* o = group + b * kGroupBlock;
    const std::byte* pieces = o + 2 * kGroupRows;
    PrefetchBlock(o + kGroupBlock, kGroupBlock);
    // Scales + 32 of sub-blocks 4k..4k + 3 in bytes 0-3 of packed[k]: low
    // nibbles of bytes 0-3 (k = 0), 4-7 (1), high ones of 0-3 (2), 4-7 (3);
    // top bits 2k, 2k + 1 of bytes 8-11.
    const __m256i p0 = LoadPiece(pieces, 24);
    const __m256i p1 = LoadPiece(pieces, 25);
    const __m256i p2 = LoadPiece(pieces, 26);
    const __m256i nibbles[4] = {
        _mm256_and_si256(p0, low4), _mm256_and_si256(p1, low4),
        _mm256_and_si256(_mm256_srli_epi16(p0, 4), low4),
        _mm256_and_si256(_mm256_srli_epi16(p1, 4), low4)};
    __m256i packed[4];
    for (int k = 0; k < 4; ++k) {
      const __m256i top =
          _mm256_and_si256(k == 0 ? p2 : _mm256_srli_epi16(p2, 2 * k), low2);
      packed[k] = _mm256_or_si256(nibbles[k], _mm256_slli_epi16(top, 4));
    }
    __m256i scales[16];
    for (int j = 0; j < 16; ++j) {
      scales[j] = _mm256_sub_epi16(SpreadByte(packed[j / 4], j % 4), offset32);
    }
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      for (int u = 0; u < 4; ++u) {
        for (int g = 0; g < 4; ++g) {
          __m256i q[2];
          for (int e = 0; e < 2; ++e) {
            const int l = 2 * u + e;
            const __m256i qs = LoadPiece(pieces, 8 + 8 * h + l);
            const __m256i hm = LoadPiece(pieces, l);
            const __m256i low = _mm256_and_si256(
                g == 0 ? qs : _mm256_srli_epi16(qs, 2 * g), low2);
            // Bit 4h + g of hmask moved to bit 2.
            const int bit = 4 * h + g;
            const __m256i high = bit >= 2 ? _mm256_srli_epi16(hm, bit - 2)
                                          : _mm256_slli_epi16(hm, 2 - bit);
            q[e] = _mm256_or_si256(low, _mm256_and_si256(high, bit2));
          }
          const __m256i scale = scales[8 * h + 2 * g + u / 2];
          const int at = 128 * h + 32 * g + 8 * u;
          for (int t = 0; t < T; ++t) {
            const __m256i x = _mm256_add_epi16(
                _mm256_maddubs_epi16(q[0], Broadcast4(a[t][b].qs + at)),
                _mm256_maddubs_epi16(q[1], Broadcast4(a[t][b].qs + at + 4)));
            AddInOrderEpi32(isum[t], _mm256_madd_epi16(x, scale));
          }
        }
      }
    }
    // The offset: 4 * sum over sub-blocks of scale * bsum, the scales of
    // sub-blocks 2v and 2v + 1 as 16-bit pairs.
    __m256i pairs[8];
    for (int v = 0; v < 8; ++v) {
      pairs[v] = _mm256_sub_epi16(
          PairBytes(packed[v / 2], 2 * (v % 2), 2 * (v % 2) + 1), offset32);
    }
    const __m256 d =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
    for (int t = 0; t < T; ++t) {
      const __m256i offset = PairsTimesBsums(pairs, a[t][b]);
      const __m256i dot =
          _mm256_sub_epi32(isum[t], _mm256_slli_epi32(offset, 2));
      acc[t] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                          _mm256_mul_ps(d, _mm256_set1_ps(a[t][b].d)), acc[t]);
    }
  }
  StoreRows<T>(p, acc, i0, rows, j0);
}

// q2_K: pieces 0-3 hold the 16 scale bytes (sub-block s: byte s % 4 of
// piece s / 4, scale in its low nibble, minimum in its high one), 4 + 8h + l
// the 2-bit values (qs) of columns 128h + 32g + 4l.. for g = 0..3 (bits 2g,
// 2g + 1), sub-block 8h + 2g + l / 4. Trailer d, dmin.
template <int T>
void GroupTileQ2_K(const QuantTileArgs& p, const std::byte* group, int64_t i0,
                   int rows, int64_t j0) {
  const int64_t nb = p.k / kQK_K;
  const BlockQ8_K* a[T];
  TokenRows<BlockQ8_K, T>(p, j0, a);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i low2 = _mm256_set1_epi8(3);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    constexpr int64_t kGroupBlock = kGroupRows * sizeof(quant::BlockQ2_K);
    const std::byte* o = group + b * kGroupBlock;
    const std::byte* pieces = o + 4 * kGroupRows;
    PrefetchBlock(o + kGroupBlock, kGroupBlock);
    __m256i scales[4], mins[4];
    for (int j = 0; j < 4; ++j) {
      const __m256i packed = LoadPiece(pieces, j);
      scales[j] = _mm256_and_si256(packed, low4);
      mins[j] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
    }
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      for (int g = 0; g < 4; ++g) {
        for (int half = 0; half < 2; ++half) {
          const int s = 8 * h + 2 * g + half;
          const __m256i scale = SpreadByte(scales[s / 4], s % 4);
          // 8 products of <= 3 * 128 per 16-bit lane.
          __m256i i16[T];
          for (int t = 0; t < T; ++t) i16[t] = _mm256_setzero_si256();
          for (int l = 4 * half; l < 4 * half + 4; ++l) {
            const __m256i qs = LoadPiece(pieces, 4 + 8 * h + l);
            const __m256i w = _mm256_and_si256(
                g == 0 ? qs : _mm256_srli_epi16(qs, 2 * g), low2);
            const int at = 128 * h + 32 * g + 4 * l;
            // Plain adds: q2_K's short chains do not spill, and kept in
            // order (AddInOrderEpi16) they ran 5-20% slower.
            for (int t = 0; t < T; ++t) {
              i16[t] = _mm256_add_epi16(
                  i16[t], _mm256_maddubs_epi16(w, Broadcast4(a[t][b].qs + at)));
            }
          }
          for (int t = 0; t < T; ++t) {
            isum[t] =
                _mm256_add_epi32(isum[t], _mm256_madd_epi16(i16[t], scale));
          }
        }
      }
    }
    // The minimums: sum over sub-blocks of minimum * bsum, those of
    // sub-blocks 2v and 2v + 1 as 16-bit pairs.
    __m256i pairs[8];
    for (int v = 0; v < 8; ++v) {
      pairs[v] = PairBytes(mins[v / 2], 2 * (v % 2), 2 * (v % 2) + 1);
    }
    const __m256 d =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
    const __m256 dmin = _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 16)));
    for (int t = 0; t < T; ++t) {
      const __m256i msum = PairsTimesBsums(pairs, a[t][b]);
      const __m256 da = _mm256_set1_ps(a[t][b].d);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]),
                               _mm256_mul_ps(d, da), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum),
                                _mm256_mul_ps(dmin, da), acc[t]);
    }
  }
  StoreRows<T>(p, acc, i0, rows, j0);
}

// The formats (quant_group_tile_avx2.h).
template <bool kFifthBit>
struct ScaleMinK {
  using Block =
      std::conditional_t<kFifthBit, quant::BlockQ5_K, quant::BlockQ4_K>;
  static constexpr int64_t kBlockElements = kQK_K;
  static constexpr int64_t kHeaderBytes = 4;  // d, dmin.
  static constexpr int64_t kTrailerBytes = 0;
  template <int T>
  static void Tile(const QuantTileArgs& p, const std::byte* group, int64_t i0,
                   int rows, int64_t j0) {
    GroupTileScaleMin<kFifthBit, T>(p, group, i0, rows, j0);
  }
};
using Q4_K = ScaleMinK<false>;
using Q5_K = ScaleMinK<true>;

struct Q2_K {
  using Block = quant::BlockQ2_K;
  static constexpr int64_t kBlockElements = kQK_K;
  static constexpr int64_t kHeaderBytes = 0;
  static constexpr int64_t kTrailerBytes = 4;  // d, dmin.
  template <int T>
  static void Tile(const QuantTileArgs& p, const std::byte* group, int64_t i0,
                   int rows, int64_t j0) {
    GroupTileQ2_K<T>(p, group, i0, rows, j0);
  }
};

struct Q3_K {
  using Block = quant::BlockQ3_K;
  static constexpr int64_t kBlockElements = kQK_K;
  static constexpr int64_t kHeaderBytes = 0;
  static constexpr int64_t kTrailerBytes = 2;  // d.
  template <int T>
  static void Tile(const QuantTileArgs& p, const std::byte* group, int64_t i0,
                   int rows, int64_t j0) {
    GroupTileQ3_K<T>(p, group, i0, rows, j0);
  }
};

struct Q6_K {
  using Block = quant::BlockQ6_K;
  static constexpr int64_t kBlockElements = kQK_K;
  static constexpr int64_t kHeaderBytes = 0;
  static constexpr int64_t kTrailerBytes = 2;  // d.
  template <int T>
  static void Tile(const QuantTileArgs& p, const std::byte* group, int64_t i0,
                   int rows, int64_t j0) {
    GroupTileQ6_K<T>(p, group, i0, rows, j0);
  }
};

}  // namespace

QuantTileFn Avx2KQuantTile(quant::QuantType weight) {
  switch (weight) {
    case quant::QuantType::kQ2_K:
      return group_avx2::ComputeGroups<Q2_K>;
    case quant::QuantType::kQ3_K:
      return group_avx2::ComputeGroups<Q3_K>;
    case quant::QuantType::kQ4_K:
      return group_avx2::ComputeGroups<Q4_K>;
    case quant::QuantType::kQ5_K:
      return group_avx2::ComputeGroups<Q5_K>;
    case quant::QuantType::kQ6_K:
      return group_avx2::ComputeGroups<Q6_K>;
    default:
      return nullptr;
  }
}

}  // namespace cpu_internal
}  // namespace ferry
