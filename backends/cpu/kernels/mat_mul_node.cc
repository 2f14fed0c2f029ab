#include "ferry/backends/cpu/kernels/mat_mul_node.h"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "ferry/backends/cpu/kernels/internal/vec.h"
#include "ferry/backends/cpu/kernels/kernel_context.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/tensor.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace cpu_kernels {
namespace {

using cpu_kernels_internal::ConvertRow;
using cpu_kernels_internal::HasAvx2;

// Register tile: kMr rows of a times kNr rows of b (12 AVX2 accumulators).
constexpr int kMr = 4;
constexpr int kNr = 3;
// K block: a kMr x kKc tile of a (16 KiB) stays in L1 while a chunk's b rows
// (kNc x kKc, 256 KiB) stay in L2.
constexpr int64_t kKc = 1024;
// Largest chunk of output handed to a thread at once.
constexpr int64_t kMc = 64;
constexpr int64_t kNc = 64;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How the output of one node is cut into chunks; identical on all threads.
struct Plan {
  int64_t m = 0, n = 0, k = 0;
  int64_t batches = 0;  // b.ne[2] * b.ne[3].
  int64_t mc = 0, nc = 0;
  int64_t m_chunks = 0, n_chunks = 0;
  int64_t total = 0;
};

Plan MakePlan(const Tensor& node, int nth) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  Plan p;
  p.m = a.ne[1];
  p.n = b.ne[1];
  p.k = a.ne[0];
  p.batches = b.ne[2] * b.ne[3];
  p.mc = std::min(p.m, kMc);
  p.nc = std::min(p.n, kNc);
  if (p.m == 0 || p.n == 0 || p.batches == 0) return p;
  const auto count = [&] {
    return p.batches * CeilDiv(p.m, p.mc) * CeilDiv(p.n, p.nc);
  };
  // Enough chunks that nth threads balance (a few per thread), but no
  // smaller than a register tile.
  while (count() < 4 * static_cast<int64_t>(nth)) {
    if (p.mc >= p.nc && p.mc > 2 * kMr) {
      p.mc = CeilDiv(p.mc / 2, kMr) * kMr;
    } else if (p.nc > 2 * kNr) {
      p.nc = CeilDiv(p.nc / 2, kNr) * kNr;
    } else if (p.mc > kMr) {
      p.mc = kMr;
    } else {
      break;
    }
  }
  p.m_chunks = CeilDiv(p.m, p.mc);
  p.n_chunks = CeilDiv(p.n, p.nc);
  p.total = p.batches * p.m_chunks * p.n_chunks;
  return p;
}

// out[i * NR + j] = sum_l a[i * lda + l] * b[j * ldb + l], l < k.
template <int MR, int NR>
void TilePortable(const float* a, int64_t lda, const float* b, int64_t ldb,
                  int64_t k, float* out) {
  float acc[MR][NR] = {};
  for (int64_t l = 0; l < k; ++l) {
    for (int i = 0; i < MR; ++i) {
      for (int j = 0; j < NR; ++j) acc[i][j] += a[i * lda + l] * b[j * ldb + l];
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) out[i * NR + j] = acc[i][j];
  }
}

}  // namespace

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace {

inline float HorizontalSumAvx2(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  lo = _mm_add_ps(lo, _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

template <int MR, int NR>
void TileAvx2(const float* a, int64_t lda, const float* b, int64_t ldb,
              int64_t k, float* out) {
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  int64_t l = 0;
  for (; l + 8 <= k; l += 8) {
    __m256 bv[NR];
    for (int j = 0; j < NR; ++j) bv[j] = _mm256_loadu_ps(b + j * ldb + l);
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_loadu_ps(a + i * lda + l);
      for (int j = 0; j < NR; ++j) {
        acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float sum = HorizontalSumAvx2(acc[i][j]);
      for (int64_t t = l; t < k; ++t) sum += a[i * lda + t] * b[j * ldb + t];
      out[i * NR + j] = sum;
    }
  }
}

}  // namespace

#pragma GCC pop_options

namespace {

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t,
                        float*);

template <int MR, int NR>
constexpr TileFn PickTile(bool avx2) {
  return avx2 ? &TileAvx2<MR, NR> : &TilePortable<MR, NR>;
}

// Tile functions indexed [avx2][mr - 1][nr - 1].
template <bool kAvx2>
constexpr TileFn kTiles[kMr][kNr] = {
    {PickTile<1, 1>(kAvx2), PickTile<1, 2>(kAvx2), PickTile<1, 3>(kAvx2)},
    {PickTile<2, 1>(kAvx2), PickTile<2, 2>(kAvx2), PickTile<2, 3>(kAvx2)},
    {PickTile<3, 1>(kAvx2), PickTile<3, 2>(kAvx2), PickTile<3, 3>(kAvx2)},
    {PickTile<4, 1>(kAvx2), PickTile<4, 2>(kAvx2), PickTile<4, 3>(kAvx2)},
};

}  // namespace

size_t MatMulScratchBytesPerThread(const Tensor& node) {
  const Tensor* a = node.src[0];
  if (a == nullptr || a->dtype == DType::kF32) return 0;
  const size_t bytes =
      static_cast<size_t>(kMr * std::min(a->ne[0], kKc)) * sizeof(float);
  return (bytes + kScratchAlignment - 1) / kScratchAlignment *
         kScratchAlignment;
}

void MatMulNode(const Tensor& node, int ith, int nth,
                const KernelContext& ctx) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const Plan p = MakePlan(node, nth);
  if (p.total == 0) return;
  const bool avx2 = HasAvx2();
  const TileFn(&tiles)[kMr][kNr] = avx2 ? kTiles<true> : kTiles<false>;

  const bool convert_a = a.dtype != DType::kF32;
  float* a_buf = nullptr;
  if (convert_a) {
    const size_t per_thread = MatMulScratchBytesPerThread(node);
    FERRY_CHECK(ctx.scratch_bytes >= per_thread * static_cast<size_t>(nth));
    a_buf = reinterpret_cast<float*>(static_cast<std::byte*>(ctx.scratch) +
                                     per_thread * static_cast<size_t>(ith));
  }

  const int64_t r2 = b.ne[2] / a.ne[2];
  const int64_t r3 = b.ne[3] / a.ne[3];
  const int64_t a_elem = a.ElementSize();
  const int64_t ldb = b.nb[1] / static_cast<int64_t>(sizeof(float));
  const int64_t chunk_begin = p.total * ith / nth;
  const int64_t chunk_end = p.total * (ith + 1) / nth;
  float out[kMr * kNr];

  for (int64_t c = chunk_begin; c < chunk_end; ++c) {
    const int64_t nci = c % p.n_chunks;
    const int64_t mci = (c / p.n_chunks) % p.m_chunks;
    const int64_t batch = c / (p.n_chunks * p.m_chunks);
    const int64_t i2 = batch % b.ne[2];
    const int64_t i3 = batch / b.ne[2];
    const int64_t m0 = mci * p.mc;
    const int64_t m1 = std::min(p.m, m0 + p.mc);
    const int64_t n0 = nci * p.nc;
    const int64_t n1 = std::min(p.n, n0 + p.nc);

    const auto* a_base = static_cast<const std::byte*>(a.data) +
                         (i2 / r2) * a.nb[2] + (i3 / r3) * a.nb[3];
    const auto* b_base =
        static_cast<const std::byte*>(b.data) + i2 * b.nb[2] + i3 * b.nb[3];
    auto* d_base =
        static_cast<std::byte*>(node.data) + i2 * node.nb[2] + i3 * node.nb[3];

    // K == 0 still runs one block, which writes zeros.
    for (int64_t k0 = 0; k0 == 0 || k0 < p.k; k0 += kKc) {
      const int64_t kc = std::min(kKc, p.k - k0);
      for (int64_t m = m0; m < m1; m += kMr) {
        const int mr = static_cast<int>(std::min<int64_t>(kMr, m1 - m));
        const float* a_tile;
        int64_t lda;
        if (convert_a) {
          for (int i = 0; i < mr; ++i) {
            ConvertRow(a.dtype, a_base + (m + i) * a.nb[1] + k0 * a_elem,
                       DType::kF32, a_buf + i * kc, kc);
          }
          a_tile = a_buf;
          lda = kc;
        } else {
          a_tile = reinterpret_cast<const float*>(a_base + m * a.nb[1]) + k0;
          lda = a.nb[1] / static_cast<int64_t>(sizeof(float));
        }
        for (int64_t n = n0; n < n1; n += kNr) {
          const int nr = static_cast<int>(std::min<int64_t>(kNr, n1 - n));
          const float* b_tile =
              reinterpret_cast<const float*>(b_base + n * b.nb[1]) + k0;
          tiles[mr - 1][nr - 1](a_tile, lda, b_tile, ldb, kc, out);
          for (int j = 0; j < nr; ++j) {
            float* d =
                reinterpret_cast<float*>(d_base + (n + j) * node.nb[1]) + m;
            if (k0 == 0) {
              for (int i = 0; i < mr; ++i) d[i] = out[i * nr + j];
            } else {
              for (int i = 0; i < mr; ++i) d[i] += out[i * nr + j];
            }
          }
        }
      }
    }
  }
}

}  // namespace cpu_kernels
}  // namespace ferry
