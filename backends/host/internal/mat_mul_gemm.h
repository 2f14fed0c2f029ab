// The cache-blocked GEMM driver shared by the SIMD kernel files
// (GotoBLAS/BLIS loop order). Each kernel file instantiates GemmThread with
// its own Kernel policy, so every function here is a template on that policy
// and gets compiled with the including file's target flags: no non-template
// inline code may live here, or the linker could hand an AVX-512 copy to a
// generic caller.
//
// A Kernel policy provides:
//   kMr, kNr        tile: kMr rows of dst (n) by kNr columns (m, the SIMD
//                   direction, since dst rows are contiguous in m).
//   kKc, kMc, kNc   cache blocks: packed A block kMc x kKc stays in L2, a
//                   packed B micro-panel kMr x kKc in L1, the packed B block
//                   kKc x kNc in L3.
//   PackA(args, m0, mc, k0, kc, dst)  packs a[m0, m0+mc)[k0, k0+kc) as f32
//                   micro-panels [kc][kNr], zero-padding the last one.
//   PackB(b, ldb, n0, nc, k0, kc, dst)  packs b[n0, n0+nc)[k0, k0+kc) as
//                   micro-panels [kc][kMr], zero-padding the last one (the
//                   portable PackRowsB below will do).
//   Tile(kc, pa, pb, c, ldc, rows, cols, accumulate)  computes one tile
//                   into c (adding to it if accumulate), writing only
//                   rows x cols.
//   Dot(args, m_range)  the small-n path for dst columns m_range.
#ifndef FERRY_BACKENDS_HOST_INTERNAL_MAT_MUL_GEMM_H_
#define FERRY_BACKENDS_HOST_INTERNAL_MAT_MUL_GEMM_H_

#include <algorithm>
#include <cstdint>

#include "ferry/backends/host/internal/mat_mul_impl.h"

namespace ferry {
namespace cpu_internal {

// Packs b[n0, n0+nc)[k0, k0+kc) as micro-panels [kc][kMr], zero-padding the
// last one, with scalar code.
template <typename Kernel>
void PackRowsB(const float* b, int64_t ldb, int64_t n0, int64_t nc, int64_t k0,
               int64_t kc, float* dst) {
  constexpr int64_t kMr = Kernel::kMr;
  for (int64_t j = 0; j < nc; j += kMr) {
    const int64_t rows = std::min(kMr, nc - j);
    for (int64_t r = 0; r < kMr; ++r) {
      if (r < rows) {
        const float* src = b + (n0 + j + r) * ldb + k0;
        for (int64_t k = 0; k < kc; ++k) dst[k * kMr + r] = src[k];
      } else {
        for (int64_t k = 0; k < kc; ++k) dst[k * kMr + r] = 0.0f;
      }
    }
    dst += kc * kMr;
  }
}

// Computes dst for the block of output `block`.
template <typename Kernel>
void GemmBlock(const MatMulArgs& args, const OutputBlock& block) {
  constexpr int64_t kMr = Kernel::kMr;
  constexpr int64_t kNr = Kernel::kNr;
  thread_local ScratchBuffer a_scratch;
  thread_local ScratchBuffer b_scratch;
  const int64_t nc_max =
      std::min<int64_t>(Kernel::kNc, (block.n.size() + kMr - 1) / kMr * kMr);
  const int64_t mc_max =
      std::min<int64_t>(Kernel::kMc, (block.m.size() + kNr - 1) / kNr * kNr);
  const int64_t kc_max = std::min<int64_t>(Kernel::kKc, args.k);
  float* pa = a_scratch.Get(mc_max * kc_max);
  float* pb = b_scratch.Get(nc_max * kc_max);
  for (int64_t n0 = block.n.begin; n0 < block.n.end; n0 += Kernel::kNc) {
    const int64_t nc = std::min<int64_t>(Kernel::kNc, block.n.end - n0);
    for (int64_t k0 = 0; k0 < args.k; k0 += Kernel::kKc) {
      const int64_t kc = std::min<int64_t>(Kernel::kKc, args.k - k0);
      Kernel::PackB(args.b, args.ldb, n0, nc, k0, kc, pb);
      for (int64_t m0 = block.m.begin; m0 < block.m.end; m0 += Kernel::kMc) {
        const int64_t mc = std::min<int64_t>(Kernel::kMc, block.m.end - m0);
        Kernel::PackA(args, m0, mc, k0, kc, pa);
        for (int64_t j = 0; j < nc; j += kMr) {
          const int rows = static_cast<int>(std::min(kMr, nc - j));
          float* c = args.dst + (n0 + j) * args.ldc + m0;
          for (int64_t i = 0; i < mc; i += kNr) {
            const int cols = static_cast<int>(std::min(kNr, mc - i));
            Kernel::Tile(kc, pa + i * kc, pb + j * kc, c + i, args.ldc, rows,
                         cols, k0 > 0);
          }
        }
      }
    }
  }
}

// Thread ith's share of MatMul(args): a fixed block, or claimed ranges when
// args.next_column is set.
template <typename Kernel>
void GemmThread(const MatMulArgs& args, int ith, int nth) {
  // Few rows of B: memory bound, so split the weight rows, which dominate
  // traffic, and skip packing.
  const bool dot = args.n <= kMaxDotN;
  if (args.next_column != nullptr) {
    // Claimed ranges span all of n, so A is packed once overall; B is packed
    // once per range, which the minimum range size keeps cheap.
    const int64_t unit = dot ? 16 : Kernel::kNr;
    const int64_t min_units = dot ? 8 : 2;
    while (true) {
      const Range m =
          ClaimColumns(*args.next_column, args.m, unit, min_units, nth);
      if (m.size() == 0) return;
      if (dot) {
        Kernel::Dot(args, m);
      } else {
        GemmBlock<Kernel>(args, OutputBlock{m, Range{0, args.n}});
      }
    }
  }
  if (dot) {
    const Range m = PartitionRange(args.m, 16, ith, nth);
    if (m.size() > 0) Kernel::Dot(args, m);
    return;
  }
  const OutputBlock block =
      PartitionOutput(args.m, args.n, Kernel::kNr, Kernel::kMr, ith, nth);
  if (block.m.size() > 0 && block.n.size() > 0) {
    GemmBlock<Kernel>(args, block);
  }
}

}  // namespace cpu_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_INTERNAL_MAT_MUL_GEMM_H_
