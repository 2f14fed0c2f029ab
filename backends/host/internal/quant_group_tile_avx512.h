// Parts the AVX-512 tiles on the 8-row group layout share
// (quant_k_tile_avx512.cc, ...). A tile takes 16 rows, two groups, at once:
// a 32-byte piece of each group (4 bytes of each of its 8 rows) fills one
// half of a zmm register, so one maddubs with a token's 4 activations
// broadcast adds 64 products (AVX2: 32), one decode of a piece's bits
// serves 16 rows (AVX2: 8), and a tile's results for a token are 16
// consecutive floats. The formats are those of quant_group_tile_avx2.h, with
// a kDType for row-major weights (laid out by LayOutRowMajorGroups).
//
// Include only from files compiled with AVX-512 flags or as their emulated
// build (avx512_intrinsics.h); everything here is in that build's namespace,
// and nothing is shared with the AVX2 tiles' header: the linker keeps one
// copy of an inline function, which must not be another ISA's.
#ifndef FERRY_BACKENDS_HOST_INTERNAL_QUANT_GROUP_TILE_AVX512_H_
#define FERRY_BACKENDS_HOST_INTERNAL_QUANT_GROUP_TILE_AVX512_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ferry/backends/host/internal/avx512_intrinsics.h"
#include "ferry/backends/host/internal/quant_group_layout.h"
#include "ferry/backends/host/internal/quant_tile_kernels.h"
#include "ferry/backends/host/internal/quant_tile_row_major.h"

namespace ferry::cpu_internal {
FERRY_AVX512_BEGIN
namespace group_avx512 {

// Rows per tile (two groups) and tokens per tile: 4 tokens' accumulators
// and a block's decoded pieces leave room in the 32 zmm registers.
inline constexpr int64_t kTileRows = 2 * kGroupRows;
inline constexpr int kGroupTokens = 4;

template <class F>
inline constexpr int64_t kGroupBlockBytes =
    kGroupRows* static_cast<int64_t>(sizeof(typename F::Block));

// The same offset into the tile's two groups (lo: rows 0-7, hi: rows 8-15;
// both the same group where the tile has 8 rows or fewer).
struct Groups {
  const std::byte* lo;
  const std::byte* hi;
  Groups operator+(int64_t at) const { return {lo + at, hi + at}; }
};

// Piece q of the two groups: rows 0-7 in the low 256 bits, 8-15 above.
inline __m512i LoadPiece(Groups g, int q) {
  const __m256i lo =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g.lo + 32 * q));
  const __m256i hi =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g.hi + 32 * q));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// The 16 rows' f16 field at `g` (8 of each group, side by side) as floats.
inline __m512 HalvesToFloats(Groups g) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g.lo));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g.hi));
  return _mm512_cvtph_ps(
      _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

// Asks for the `bytes` at `g` (the next block of both groups, read in an
// order the hardware prefetcher does not follow) to be brought into cache.
inline void PrefetchBlock(Groups g, int64_t bytes) {
  for (int64_t at = 0; at < bytes; at += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(g.lo + at), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(g.hi + at), _MM_HINT_T0);
  }
}

// A token's activation bytes [at, at + 4) in every 32-bit lane.
inline __m512i Broadcast4(const int8_t* qs) {
  int32_t v;
  std::memcpy(&v, qs, 4);
  return _mm512_set1_epi32(v);
}

// Shuffles each 128-bit lane of `v` by the same 16 indexes.
inline __m512i ShuffleLanes(__m512i v, __m128i index) {
  return _mm512_shuffle_epi8(v, _mm512_broadcast_i32x4(index));
}

// Byte `byte` (< 4) of each row's dword as a 16-bit lane, both halves of
// the dword (so madd multiplies pairs of 16-bit sums by it).
inline __m512i SpreadByte(__m512i dwords, int byte) {
  const char b = static_cast<char>(byte);
  return ShuffleLanes(
      dwords, _mm_setr_epi8(b, -1, b, -1, 4 + b, -1, 4 + b, -1, 8 + b, -1,
                            8 + b, -1, 12 + b, -1, 12 + b, -1));
}

// Bytes b0 and b1 of each row's dword as the dword's two 16-bit lanes.
inline __m512i PairBytes(__m512i dwords, int b0, int b1) {
  const char x = static_cast<char>(b0), y = static_cast<char>(b1);
  return ShuffleLanes(
      dwords, _mm_setr_epi8(x, -1, y, -1, 4 + x, -1, 4 + y, -1, 8 + x, -1,
                            8 + y, -1, 12 + x, -1, 12 + y, -1));
}

// As PairBytes with signed bytes, sign-extended: each goes into the high
// byte of its 16-bit lane, then an arithmetic shift brings it down.
inline __m512i PairSignedBytes(__m512i dwords, int b0, int b1) {
  const char x = static_cast<char>(b0), y = static_cast<char>(b1);
  return _mm512_srai_epi16(
      ShuffleLanes(dwords,
                   _mm_setr_epi8(-1, x, -1, y, -1, 4 + x, -1, 4 + y, -1, 8 + x,
                                 -1, 8 + y, -1, 12 + x, -1, 12 + y)),
      8);
}

// The activation rows of tokens j0..j0 + T - 1, as blocks of Act.
template <class Act, int T>
inline void TokenRows(const QuantTileArgs& p, int64_t j0, const Act** a) {
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const Act*>(p.act + (j0 + t) * p.act_row_bytes);
  }
}

// Stores rows [i0, i0 + rows) (rows <= 16) of tokens j0..j0 + T - 1.
template <int T>
inline void StoreRows(const QuantTileArgs& p, const __m512* acc, int64_t i0,
                      int rows, int64_t j0) {
  const auto mask = static_cast<__mmask16>((1u << rows) - 1);
  for (int t = 0; t < T; ++t) {
    _mm512_mask_storeu_ps(p.dst + (j0 + t) * p.ldc + i0, mask, acc[t]);
  }
}

// Computes dst for weight rows [row_begin, row_end) and tokens
// [token_begin, token_end), 16 rows at a time (laid out first when the
// weights are row-major), tiles of kGroupTokens tokens and a remainder.
template <class F>
void ComputeGroups(const QuantTileArgs& p, int64_t row_begin, int64_t row_end,
                   int64_t token_begin, int64_t token_end) {
  for (int64_t i = row_begin; i < row_end; i += kTileRows) {
    const int rows =
        static_cast<int>(row_end - i < kTileRows ? row_end - i : kTileRows);
    // Packed: i % 8 == 0, and groups are 8 rows of bytes apart.
    const std::byte* lo = p.grouped
                              ? p.w + i * p.w_row_bytes
                              : LayOutRowMajorGroups(p, F::kDType, i, rows);
    const int64_t group_bytes =
        p.grouped ? kGroupRows * p.w_row_bytes
                  : p.k / F::kBlockElements * kGroupBlockBytes<F>;
    const Groups g{lo, rows > kGroupRows ? lo + group_bytes : lo};
    int64_t j = token_begin;
    for (; j + kGroupTokens <= token_end; j += kGroupTokens) {
      F::template Tile<kGroupTokens>(p, g, i, rows, j);
    }
    switch (token_end - j) {
      case 3:
        F::template Tile<3>(p, g, i, rows, j);
        break;
      case 2:
        F::template Tile<2>(p, g, i, rows, j);
        break;
      case 1:
        F::template Tile<1>(p, g, i, rows, j);
        break;
      default:
        break;
    }
  }
}

}  // namespace group_avx512
FERRY_AVX512_END
}  // namespace ferry::cpu_internal

#endif  // FERRY_BACKENDS_HOST_INTERNAL_QUANT_GROUP_TILE_AVX512_H_
