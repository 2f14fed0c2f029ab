// Parts the AVX2 tiles on the 8-row group layout share (quant_k_tile_avx2.cc,
// quant_iq4_tile_avx2.cc): laying out row-major weights a group at a time,
// spreading per-row scale bytes into 16-bit lanes, storing a tile's rows,
// and the loop over groups and tokens. Include only from files compiled
// with -mavx2 -mfma -mf16c.
//
// A format F names its Block, the f16 field bytes before (kHeaderBytes) and
// after (kTrailerBytes) its pieces as quant_group_layout.h orders them, the
// elements per block (kBlockElements), and a Tile<T>(args, group, i0, rows,
// j0) that computes dst for the group's rows [i0, i0 + rows) and tokens
// [j0, j0 + T).
#ifndef FERRY_BACKENDS_HOST_INTERNAL_QUANT_GROUP_TILE_AVX2_H_
#define FERRY_BACKENDS_HOST_INTERNAL_QUANT_GROUP_TILE_AVX2_H_

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ferry/backends/host/internal/quant_group_layout.h"
#include "ferry/backends/host/internal/quant_tile_kernels.h"
#include "ferry/backends/host/internal/quant_tile_row_major.h"

namespace ferry::cpu_internal::group_avx2 {

// Tokens per tile: their accumulators and a block's pieces fill the 16 ymm
// registers.
inline constexpr int kGroupTokens = 4;
inline constexpr int64_t kPieceBytes = 4;

template <class F>
inline constexpr int64_t kBlockBytes =
    static_cast<int64_t>(sizeof(typename F::Block));
template <class F>
inline constexpr int64_t kFieldBytes = F::kHeaderBytes + F::kTrailerBytes;
template <class F>
inline constexpr int64_t kPieces =
    (kBlockBytes<F> - kFieldBytes<F>) / kPieceBytes;
template <class F>
inline constexpr int64_t kGroupBlockBytes = kGroupRows* kBlockBytes<F>;

inline __m256i LoadPiece(const std::byte* pieces, int q) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pieces + 32 * q));
}

// Asks for the `bytes` after `p` (the next block of a group, read in an
// order the hardware prefetcher does not follow) to be brought into cache.
inline void PrefetchBlock(const std::byte* p, int64_t bytes) {
  for (int64_t at = 0; at < bytes; at += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + at), _MM_HINT_T0);
  }
}

// Token t's activation bytes [at, at + 4) in every 32-bit lane.
inline __m256i Broadcast4(const int8_t* qs) {
  int32_t v;
  std::memcpy(&v, qs, 4);
  return _mm256_set1_epi32(v);
}

// out[q] = dword q of each of the 8 rows (row r in lane r), from 32 bytes
// at each of rows[r] + at.
inline void Transpose8x8(const std::byte* const* rows, int64_t at,
                         __m256i* out) {
  __m256i x[8], t[8], u[8];
  for (int r = 0; r < 8; ++r) {
    x[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[r] + at));
  }
  for (int r = 0; r < 8; r += 2) {
    t[r] = _mm256_unpacklo_epi32(x[r], x[r + 1]);      // 0, 1 | 4, 5.
    t[r + 1] = _mm256_unpackhi_epi32(x[r], x[r + 1]);  // 2, 3 | 6, 7.
  }
  for (int h = 0; h < 8; h += 4) {
    u[h + 0] = _mm256_unpacklo_epi64(t[h], t[h + 2]);      // 0 | 4.
    u[h + 1] = _mm256_unpackhi_epi64(t[h], t[h + 2]);      // 1 | 5.
    u[h + 2] = _mm256_unpacklo_epi64(t[h + 1], t[h + 3]);  // 2 | 6.
    u[h + 3] = _mm256_unpackhi_epi64(t[h + 1], t[h + 3]);  // 3 | 7.
  }
  for (int q = 0; q < 4; ++q) {
    out[q] = _mm256_permute2x128_si256(u[q], u[q + 4], 0x20);
    out[q + 4] = _mm256_permute2x128_si256(u[q], u[q + 4], 0x31);
  }
}

// Lays out weight rows [i0, i0 + rows) (rows <= 8; missing rows repeat the
// last one, whose lanes are never stored) as the group layout at `out`.
template <class F>
void LayOutGroup(const QuantTileArgs& p, int64_t i0, int rows, std::byte* out) {
  const int64_t nb = p.k / F::kBlockElements;
  const std::byte* w[kGroupRows];
  for (int r = 0; r < kGroupRows; ++r) {
    w[r] = p.w + (i0 + std::min(r, rows - 1)) * p.w_row_bytes;
  }
  const std::byte* row_blocks[kGroupRows];
  for (int64_t b = 0; b < nb; ++b) {
    std::byte* o = out + b * kGroupBlockBytes<F>;
    for (int r = 0; r < kGroupRows; ++r) {
      row_blocks[r] = w[r] + b * kBlockBytes<F>;
      for (int64_t f = 0; f < kFieldBytes<F>; f += 2) {
        const int64_t from =
            f < F::kHeaderBytes ? f : kBlockBytes<F> - kFieldBytes<F> + f;
        std::memcpy(o + f * kGroupRows + 2 * r, row_blocks[r] + from, 2);
      }
    }
    std::byte* pieces = o + kFieldBytes<F> * kGroupRows;
    int64_t q = 0;
    for (; q + 8 <= kPieces<F>; q += 8) {
      __m256i t[8];
      Transpose8x8(row_blocks, F::kHeaderBytes + q * kPieceBytes, t);
      for (int s = 0; s < 8; ++s) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(pieces + 32 * (q + s)),
                            t[s]);
      }
    }
    for (; q < kPieces<F>; ++q) {
      for (int r = 0; r < kGroupRows; ++r) {
        std::memcpy(pieces + 32 * q + 4 * r,
                    row_blocks[r] + F::kHeaderBytes + q * kPieceBytes, 4);
      }
    }
  }
}

// Byte `byte` (< 4) of each row's dword as a 16-bit lane, both halves of
// the dword (so madd multiplies pairs of 16-bit sums by it).
inline __m256i SpreadByte(__m256i dwords, int byte) {
  const char b = static_cast<char>(byte);
  const __m256i index =
      _mm256_setr_epi8(b, -1, b, -1, 4 + b, -1, 4 + b, -1, 8 + b, -1, 8 + b, -1,
                       12 + b, -1, 12 + b, -1, b, -1, b, -1, 4 + b, -1, 4 + b,
                       -1, 8 + b, -1, 8 + b, -1, 12 + b, -1, 12 + b, -1);
  return _mm256_shuffle_epi8(dwords, index);
}

// Bytes b0 and b1 of each row's dword as the dword's two 16-bit lanes.
inline __m256i PairBytes(__m256i dwords, int b0, int b1) {
  const char x = static_cast<char>(b0), y = static_cast<char>(b1);
  const __m256i index =
      _mm256_setr_epi8(x, -1, y, -1, 4 + x, -1, 4 + y, -1, 8 + x, -1, 8 + y, -1,
                       12 + x, -1, 12 + y, -1, x, -1, y, -1, 4 + x, -1, 4 + y,
                       -1, 8 + x, -1, 8 + y, -1, 12 + x, -1, 12 + y, -1);
  return _mm256_shuffle_epi8(dwords, index);
}

// As PairBytes with signed bytes, sign-extended: each goes into the high
// byte of its 16-bit lane, then an arithmetic shift brings it down.
inline __m256i PairSignedBytes(__m256i dwords, int b0, int b1) {
  const char x = static_cast<char>(b0), y = static_cast<char>(b1);
  const __m256i index =
      _mm256_setr_epi8(-1, x, -1, y, -1, 4 + x, -1, 4 + y, -1, 8 + x, -1, 8 + y,
                       -1, 12 + x, -1, 12 + y, -1, x, -1, y, -1, 4 + x, -1,
                       4 + y, -1, 8 + x, -1, 8 + y, -1, 12 + x, -1, 12 + y);
  return _mm256_srai_epi16(_mm256_shuffle_epi8(dwords, index), 8);
}

// The activation rows of tokens j0..j0 + T - 1, as blocks of Act.
template <class Act, int T>
inline void TokenRows(const QuantTileArgs& p, int64_t j0, const Act** a) {
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const Act*>(p.act + (j0 + t) * p.act_row_bytes);
  }
}

template <int T>
inline void StoreRows(const QuantTileArgs& p, const __m256* acc, int64_t i0,
                      int rows, int64_t j0) {
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

// Computes dst for weight rows [row_begin, row_end) and tokens
// [token_begin, token_end), a group of rows at a time (laid out first when
// the weights are row-major), tiles of kGroupTokens tokens and a remainder.
template <class F>
void ComputeGroups(const QuantTileArgs& p, int64_t row_begin, int64_t row_end,
                   int64_t token_begin, int64_t token_end) {
  const int64_t nb = p.k / F::kBlockElements;
  std::byte* const group =
      p.grouped
          ? nullptr
          : TileGroupScratch(static_cast<size_t>(nb * kGroupBlockBytes<F>));
  for (int64_t i = row_begin; i < row_end; i += kGroupRows) {
    const int rows =
        static_cast<int>(std::min<int64_t>(kGroupRows, row_end - i));
    const std::byte* g = p.w + i * p.w_row_bytes;  // Packed: i % 8 == 0.
    if (!p.grouped) {
      LayOutGroup<F>(p, i, rows, group);
      g = group;
    }
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

}  // namespace ferry::cpu_internal::group_avx2

#endif  // FERRY_BACKENDS_HOST_INTERNAL_QUANT_GROUP_TILE_AVX2_H_
