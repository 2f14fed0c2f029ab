// AVX2 tiles of quantized dot products (compiled with -mavx2 -mfma -mf16c),
// on weights in groups of 8 rows laid out as quant_group_layout.h says: per
// block, the 8 rows' f16 scales (and minimums), then pieces of 32 bytes,
// each 4 bytes of every row. A piece is 4 columns of the 8 rows (q4 and q5:
// its low or high nibbles, q5's fifth bits taken from its qh piece, which
// comes first), so one maddubs with a token's 4 activations,
// broadcast, adds products into each row's lanes and a block's 8 rows come
// out as the 8 lanes of one vector: scaled by one multiply and stored with
// no horizontal sums. Row-major weights are laid out a group at a time into
// thread-local scratch first (one pass over the group's bytes, shared by
// every token); packed ones (CpuPackedBuffer) are read where they are.
// At one token (decode) each block prefetches the one two ahead: the
// weights then come from memory, not cache (SmolLM2 Q4_1 generation, 2
// threads: 133 / 137 tok/s against 129 / 125, medians of 7).
// Measured on an AVX2-only EPYC, 1536 x 576 q4_1, one thread, per token
// against one token's time: 8 tokens 0.35x, 32 tokens 0.30x (a tile of 2
// rows by 4 tokens with a float accumulator per pair took 0.71x at 8).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ferry/backends/host/internal/avx2_blocks.h"
#include "ferry/backends/host/internal/quant_group_layout.h"
#include "ferry/backends/host/internal/quant_group_tile_avx2.h"
#include "ferry/backends/host/internal/quant_tile_kernels.h"
#include "ferry/backends/host/internal/quant_tile_row_major.h"
#include "ferry/quant/block_formats.h"

namespace ferry {
namespace cpu_internal {
namespace {

using group_avx2::PrefetchBlock;
using group_avx2::StoreRows;
using host_avx2::AddInOrderEpi16;
using host_avx2::AddInOrderEpi32;
using host_avx2::Half;
using host_avx2::Load32;
using quant::kQK;

// Tokens per tile: their accumulators and the block's pieces fill the 16
// ymm registers.
constexpr int kGroupTokens = 4;

// Weight formats. kNibbles: 16 bytes of 4-bit values per block, unsigned,
// with (kFifthBit) a fifth bit each from 4 bytes qh; stored as w + kOffset
// (q4_0, q5_0) or w (q4_1, q5_1, which add a minimum). Else 32 signed bytes
// (q8_0), whose signs go onto the activations since maddubs multiplies
// unsigned by signed.
struct Q4_0 {
  using Block = quant::BlockQ4_0;
  using Act = quant::BlockQ8_0;
  static constexpr bool kMin = false;
  static constexpr bool kNibbles = true;
  static constexpr bool kFifthBit = false;
  static constexpr int kOffset = 8;
};

struct Q4_1 {
  using Block = quant::BlockQ4_1;
  using Act = quant::BlockQ8_1;
  static constexpr bool kMin = true;
  static constexpr bool kNibbles = true;
  static constexpr bool kFifthBit = false;
  static constexpr int kOffset = 0;
};

struct Q5_0 {
  using Block = quant::BlockQ5_0;
  using Act = quant::BlockQ8_0;
  static constexpr bool kMin = false;
  static constexpr bool kNibbles = true;
  static constexpr bool kFifthBit = true;
  static constexpr int kOffset = 16;
};

struct Q5_1 {
  using Block = quant::BlockQ5_1;
  using Act = quant::BlockQ8_1;
  static constexpr bool kMin = true;
  static constexpr bool kNibbles = true;
  static constexpr bool kFifthBit = true;
  static constexpr int kOffset = 0;
};

struct Q8_0 {
  using Block = quant::BlockQ8_0;
  using Act = quant::BlockQ8_0;
  static constexpr bool kMin = false;
  static constexpr bool kNibbles = false;
  static constexpr bool kFifthBit = false;
  static constexpr int kOffset = 0;
};

template <class F>
constexpr int64_t kHeaderBytes = F::kMin ? 4 : 2;
template <class F>
constexpr int kPieces = F::kFifthBit  ? 5
                        : F::kNibbles ? 4
                                      : 8;
template <class F>
constexpr int64_t kGroupBlockBytes =
    kGroupRows* static_cast<int64_t>(sizeof(typename F::Block));

struct TokenScales {
  const float* d;      // Per token, per block: d of the activation block.
  const float* s;      // q4_1: its stored s (f16 of d * sum of qs).
  const int32_t* sum;  // q4_0, q5_0: kOffset * sum of its qs.
};

inline __m128i Load16(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

inline __m256 HalvesToFloats(const std::byte* p) {
  return _mm256_cvtph_ps(Load16(p));
}

// The pieces of 8 rows' values: rows r and r + 4 share a vector, 4 dwords
// each (q4) or 8 (q8); unpacking dwords, then qwords (and for q8 lanes)
// gathers dword q of every row into piece q. q5's qh, one dword per row,
// go first.
template <class F>
void Transpose(const typename F::Block* const* w, int64_t b, __m256i* out) {
  if constexpr (F::kFifthBit) {
    alignas(32) uint8_t qh[kGroupRows][4];
    for (int r = 0; r < kGroupRows; ++r) std::memcpy(qh[r], w[r][b].qh, 4);
    out[0] = _mm256_load_si256(reinterpret_cast<const __m256i*>(qh));
    ++out;
  }
  if constexpr (F::kNibbles) {
    __m256i x[4];
    for (int r = 0; r < 4; ++r) {
      x[r] = _mm256_set_m128i(Load16(w[r + 4][b].qs), Load16(w[r][b].qs));
    }
    const __m256i t0 = _mm256_unpacklo_epi32(x[0], x[1]);
    const __m256i t1 = _mm256_unpackhi_epi32(x[0], x[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(x[2], x[3]);
    const __m256i t3 = _mm256_unpackhi_epi32(x[2], x[3]);
    out[0] = _mm256_unpacklo_epi64(t0, t2);
    out[1] = _mm256_unpackhi_epi64(t0, t2);
    out[2] = _mm256_unpacklo_epi64(t1, t3);
    out[3] = _mm256_unpackhi_epi64(t1, t3);
  } else {
    __m256i t[8];
    for (int r = 0; r < 8; r += 2) {
      const __m256i x0 = Load32(w[r][b].qs);
      const __m256i x1 = Load32(w[r + 1][b].qs);
      t[r] = _mm256_unpacklo_epi32(x0, x1);      // Pieces 0, 1 | 4, 5.
      t[r + 1] = _mm256_unpackhi_epi32(x0, x1);  // Pieces 2, 3 | 6, 7.
    }
    for (int h = 0; h < 2; ++h) {
      // Rows 4h..4h+3: u[q] holds piece q in its low lane, q + 4 high.
      const __m256i* th = t + 4 * h;
      const __m256i u0 = _mm256_unpacklo_epi64(th[0], th[2]);
      const __m256i u1 = _mm256_unpackhi_epi64(th[0], th[2]);
      const __m256i u2 = _mm256_unpacklo_epi64(th[1], th[3]);
      const __m256i u3 = _mm256_unpackhi_epi64(th[1], th[3]);
      out[8 + 4 * h + 0] = u0;
      out[8 + 4 * h + 1] = u1;
      out[8 + 4 * h + 2] = u2;
      out[8 + 4 * h + 3] = u3;
    }
    for (int q = 0; q < 4; ++q) {
      const __m256i lo_rows = out[8 + q];
      const __m256i hi_rows = out[12 + q];
      out[q] = _mm256_permute2x128_si256(lo_rows, hi_rows, 0x20);
      out[q + 4] = _mm256_permute2x128_si256(lo_rows, hi_rows, 0x31);
    }
  }
}

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
    std::byte* o = out + b * kGroupBlockBytes<F>;
    __m256i pieces[16];
    Transpose<F>(w, b, pieces);
    auto* v = reinterpret_cast<__m256i*>(o + kHeaderBytes<F> * kGroupRows);
    for (int q = 0; q < kPieces<F>; ++q) _mm256_storeu_si256(v + q, pieces[q]);
    uint16_t d[kGroupRows], m[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) {
      d[r] = r < rows ? w[r][b].d : 0;
      if constexpr (F::kMin) m[r] = r < rows ? w[r][b].m : 0;
    }
    std::memcpy(o, d, sizeof(d));
    if constexpr (F::kMin) std::memcpy(o + sizeof(d), m, sizeof(m));
  }
}

// The fifth bits of piece q's low (kHigh: high) nibbles as 0 or 16 per
// byte, from the 8 rows' qh dwords. Column c = 4q + j (or 16 + 4q + j) has
// bit c of its row's dword: its qh byte, copied into each byte of the
// row's dword, masked with one bit per byte, which is bit 4 + j there (the
// dword shifted left by 4 first where the bits sit low, q even); min with
// 16 turns any set bit into 16.
template <int q, bool kHigh>
inline __m256i FifthBits(__m256i qh, __m256i qh4) {
  constexpr char i = (kHigh ? 2 : 0) + q / 2;
  const __m256i copy = _mm256_setr_epi8(
      i, i, i, i, 4 + i, 4 + i, 4 + i, 4 + i, 8 + i, 8 + i, 8 + i, 8 + i,
      12 + i, 12 + i, 12 + i, 12 + i, i, i, i, i, 4 + i, 4 + i, 4 + i, 4 + i,
      8 + i, 8 + i, 8 + i, 8 + i, 12 + i, 12 + i, 12 + i, 12 + i);
  const __m256i bytes = _mm256_shuffle_epi8(q % 2 == 0 ? qh4 : qh, copy);
  const __m256i bit =
      _mm256_and_si256(bytes, _mm256_set1_epi32(static_cast<int>(0x80402010)));
  return _mm256_min_epu8(bit, _mm256_set1_epi8(16));
}

// Adds the products of piece q's columns (nibbles with their fifth bits)
// with each token's activations to its 16-bit sums.
template <class F, int T, int q>
inline void AddPiece(const __m256i* v, __m256i qh, __m256i qh4,
                     const __m256i* const* bc, int64_t b, __m256i* isum) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  // Low nibbles are columns 4q..4q+3, high ones 16 + 4q..16 + 4q + 3.
  const __m256i piece = _mm256_loadu_si256(v + q);
  __m256i lo = _mm256_and_si256(piece, low);
  __m256i hi = _mm256_and_si256(_mm256_srli_epi16(piece, 4), low);
  if constexpr (F::kFifthBit) {
    lo = _mm256_or_si256(lo, FifthBits<q, false>(qh, qh4));
    hi = _mm256_or_si256(hi, FifthBits<q, true>(qh, qh4));
  }
  for (int t = 0; t < T; ++t) {
    const __m256i* ab = bc[t] + 8 * b;
    AddInOrderEpi16(isum[t], _mm256_maddubs_epi16(lo, ab[q]));
    AddInOrderEpi16(isum[t], _mm256_maddubs_epi16(hi, ab[4 + q]));
  }
}

// The 8 rows' integer dots of block `b` with token activations a[t][b], as
// 32-bit lanes.
template <class F, int T>
void BlockDots(const std::byte* o, const typename F::Act* const* a,
               const __m256i* const* bc, int64_t b, __m256i* dots) {
  const auto* v =
      reinterpret_cast<const __m256i*>(o + kHeaderBytes<F> * kGroupRows);
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (F::kNibbles) {
    __m256i qh = _mm256_setzero_si256(), qh4 = qh;
    if constexpr (F::kFifthBit) {
      qh = _mm256_loadu_si256(v++);
      qh4 = _mm256_slli_epi32(qh, 4);
    }
    // 16-bit sums: 16 products of <= 15 * 127 each stay below 2^15, but
    // only 8 of <= 31 * 127 (q5), so q5 widens to 32 bits every 2 pieces.
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    AddPiece<F, T, 0>(v, qh, qh4, bc, b, isum);
    AddPiece<F, T, 1>(v, qh, qh4, bc, b, isum);
    if constexpr (F::kFifthBit) {
      for (int t = 0; t < T; ++t) {
        dots[t] = _mm256_madd_epi16(isum[t], ones);
        isum[t] = _mm256_setzero_si256();
      }
    }
    AddPiece<F, T, 2>(v, qh, qh4, bc, b, isum);
    AddPiece<F, T, 3>(v, qh, qh4, bc, b, isum);
    for (int t = 0; t < T; ++t) {
      const __m256i d = _mm256_madd_epi16(isum[t], ones);
      if constexpr (F::kFifthBit) {
        dots[t] = _mm256_add_epi32(dots[t], d);
      } else {
        dots[t] = d;
      }
    }
  } else {
    // A pair of products of <= 128 * 127 fits 16 bits; two do not.
    for (int t = 0; t < T; ++t) dots[t] = _mm256_setzero_si256();
    for (int q = 0; q < 8; ++q) {
      const __m256i w = _mm256_loadu_si256(v + q);
      const __m256i w_abs = _mm256_sign_epi8(w, w);
      for (int t = 0; t < T; ++t) {
        int32_t av;
        std::memcpy(&av, a[t][b].qs + 4 * q, 4);
        const __m256i as = _mm256_sign_epi8(_mm256_set1_epi32(av), w);
        const __m256i x =
            _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, as), ones);
        // One token is one chain: there the compiler's tree of adds is
        // faster (3-4% at n = 1); several spill without the order.
        if constexpr (T > 1) {
          AddInOrderEpi32(dots[t], x);
        } else {
          dots[t] = _mm256_add_epi32(dots[t], x);
        }
      }
    }
  }
}

// dst for the group at `group` (rows i0 to i0 + rows, rows <= 8) and tokens
// [j0, j0 + T).
template <class F, int T>
void GroupTile(const QuantTileArgs& p, const std::byte* group,
               const TokenScales& ts, const __m256i* bcast, int64_t i0,
               int rows, int64_t j0, int64_t token_begin) {
  using Act = typename F::Act;
  const int64_t nb = p.k / kQK;
  const Act* a[T];
  group_avx2::TokenRows<Act, T>(p, j0, a);
  const int64_t ts0 = (j0 - token_begin) * nb;
  const __m256i* bc[T];
  for (int t = 0; t < T; ++t) bc[t] = bcast + (ts0 + t * nb) * 8;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* o = group + b * kGroupBlockBytes<F>;
    if (T == 1) {
      PrefetchBlock(o + 2 * kGroupBlockBytes<F>, kGroupBlockBytes<F>);
    }
    __m256i dots[T];
    BlockDots<F, T>(o, a, bc, b, dots);
    const __m256 wd = HalvesToFloats(o);
    for (int t = 0; t < T; ++t) {
      const int64_t at = ts0 + t * nb + b;
      if constexpr (F::kOffset != 0) {
        // Stored values are w + kOffset: take kOffset * sum(a) back off.
        dots[t] = _mm256_sub_epi32(dots[t], _mm256_set1_epi32(ts.sum[at]));
      }
      acc[t] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots[t]),
                          _mm256_mul_ps(wd, _mm256_set1_ps(ts.d[at])), acc[t]);
      if constexpr (F::kMin) {
        acc[t] = _mm256_fmadd_ps(HalvesToFloats(o + 2 * kGroupRows),
                                 _mm256_set1_ps(ts.s[at]), acc[t]);
      }
    }
  }
  StoreRows<T>(p, acc, i0, rows, j0);
}

// Tokens per pass over the weight rows: their broadcast activations (256
// bytes a block each) stay a few MB at most, whatever the batch.
constexpr int64_t kChunkTokens = 64;

// ComputeGroups for at most kChunkTokens tokens.
template <class F>
void ComputeChunk(const QuantTileArgs& p, int64_t row_begin, int64_t row_end,
                  int64_t token_begin, int64_t token_end) {
  using Act = typename F::Act;
  const int64_t nb = p.k / kQK;
  const int64_t n = token_end - token_begin;
  std::byte* const group =
      p.grouped
          ? nullptr
          : TileGroupScratch(static_cast<size_t>(nb * kGroupBlockBytes<F>));
  // Per (token, block): d, s and the offset sum, 4 bytes each.
  const auto per_token = static_cast<size_t>(n * nb);
  // And for nibble formats each activation dword broadcast to 32 bytes, 8
  // per block, which maddubs reads from memory (no broadcast instructions
  // in the tile).
  constexpr size_t kBcastBytes = F::kNibbles ? 8 * 32 : 0;
  std::byte* const token_scratch =
      TileTokenScratch((3 * 4 + kBcastBytes) * per_token + 32);
  float* const token_d = reinterpret_cast<float*>(token_scratch);
  float* const token_s = token_d + per_token;
  auto* const token_sum = reinterpret_cast<int32_t*>(token_s + per_token);
  auto* const bcast = reinterpret_cast<__m256i*>(
      (reinterpret_cast<uintptr_t>(token_sum + per_token) + 31) &
      ~uintptr_t{31});
  // The token values this thread laid out last. QuantMatMul hands a thread
  // its rows in several calls on the same activations (one act_id): those
  // after the first find them still in the scratch.
  struct Laid {
    uint64_t act_id;
    const std::byte* act;
    const std::byte* scratch;
    int64_t k, token_begin, token_end;
    bool operator==(const Laid&) const = default;
  };
  thread_local Laid last{};
  const Laid now{p.act_id, p.act, token_scratch, p.k, token_begin, token_end};
  if (p.act_id == 0 || now != last) {
    for (int64_t j = 0; j < n; ++j) {
      const Act* a = reinterpret_cast<const Act*>(p.act + (token_begin + j) *
                                                              p.act_row_bytes);
      for (int64_t b = 0; b < nb; ++b) {
        const auto at = static_cast<size_t>(j * nb + b);
        token_d[at] = Half(a[b].d);
        if constexpr (F::kNibbles) {
          for (int q = 0; q < 8; ++q) {
            int32_t dword;
            std::memcpy(&dword, a[b].qs + 4 * q, 4);
            _mm256_store_si256(bcast + 8 * at + q, _mm256_set1_epi32(dword));
          }
        }
        if constexpr (F::kMin) token_s[at] = Half(a[b].s);
        if constexpr (F::kOffset != 0) {
          // kOffset * sum(qs): maddubs pairs, then madd by kOffset into 32
          // bits.
          const __m256i s16 =
              _mm256_maddubs_epi16(_mm256_set1_epi8(1), Load32(a[b].qs));
          const __m256i s32 =
              _mm256_madd_epi16(s16, _mm256_set1_epi16(F::kOffset));
          __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32),
                                    _mm256_extracti128_si256(s32, 1));
          s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
          s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
          token_sum[at] = _mm_cvtsi128_si32(s);
        }
      }
    }
    last = now;
  }
  const TokenScales ts{token_d, token_s, token_sum};
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
      GroupTile<F, kGroupTokens>(p, g, ts, bcast, i, rows, j, token_begin);
    }
    switch (token_end - j) {
      case 3:
        GroupTile<F, 3>(p, g, ts, bcast, i, rows, j, token_begin);
        break;
      case 2:
        GroupTile<F, 2>(p, g, ts, bcast, i, rows, j, token_begin);
        break;
      case 1:
        GroupTile<F, 1>(p, g, ts, bcast, i, rows, j, token_begin);
        break;
      default:
        break;
    }
  }
}

template <class F>
void ComputeGroups(const QuantTileArgs& p, int64_t row_begin, int64_t row_end,
                   int64_t token_begin, int64_t token_end) {
  for (int64_t j = token_begin; j < token_end; j += kChunkTokens) {
    ComputeChunk<F>(p, row_begin, row_end, j,
                    std::min(token_end, j + kChunkTokens));
  }
}

}  // namespace

QuantTileFn Avx2QuantTile(quant::QuantType weight) {
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

}  // namespace cpu_internal
}  // namespace ferry
