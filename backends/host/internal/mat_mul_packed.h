// The GEMM driver for weights already in the panel layout (packed_layout.h),
// shared by the SIMD kernel files like mat_mul_gemm.h (and, like it, all
// templates, so each file compiles it with its own target flags).
//
// With `a` packed, only B is packed per call, into kMr-row micro-panels, and
// A is read straight from where the weight lives: nothing of it is copied or
// transposed. Two loop orders:
//   - few rows of B (n * K <= kMaxWholeKB: decode and small batches, where
//     the weight's memory traffic is what counts): B is packed whole, then
//     each panel is streamed once, start to end, in kPackedKc blocks that
//     every micro-panel uses while the block is in L2; meanwhile the
//     micro-panels prefetch the next block into L2, so the first of them
//     does not wait for memory;
//   - otherwise (GotoBLAS order): for each block of kPackedNc rows of B and
//     kPackedKc of K, B is packed, then every panel's K block is multiplied
//     with every micro-panel, read from memory once per block of B.
//
// A Kernel policy provides, besides what mat_mul_gemm.h lists:
//   kPackedKc, kPackedNc   the K and B-row blocks of this driver.
//   PanelTile<T>(rows, kc, pa, pb, c, ldc, cols, accumulate, pf, pf_end)
//                   computes rows (1..kMr) x kPanelWidth outputs from kc
//                   steps of the panel at pa (rows of kPanelWidth elements
//                   of T) and the B micro-panel at pb ([kc][kMr]), writing
//                   only `cols` columns of c (adding to them if accumulate);
//                   meanwhile prefetches the lines [pf, pf_end) into L2.
#ifndef FERRY_BACKENDS_HOST_INTERNAL_MAT_MUL_PACKED_H_
#define FERRY_BACKENDS_HOST_INTERNAL_MAT_MUL_PACKED_H_

#include <algorithm>
#include <cstdint>

#include "ferry/backends/host/internal/mat_mul_impl.h"
#include "ferry/backends/host/internal/packed_layout.h"
#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_internal {

// Largest B block, in floats, that is packed whole (all of K) so that each
// panel is streamed once, start to end: 512 KiB, half of a Zen 4 L2.
inline constexpr int64_t kMaxWholeKB = int64_t{1} << 17;

// Computes dst for `block`, whose column range starts at a panel boundary.
// `b_packed` says whether this thread's scratch already holds B rows
// block.n packed whole by an earlier call for the same args (several claimed
// column ranges of one MatMul); set when this call leaves them there.
template <typename Kernel, typename T>
void PackedGemmBlock(const MatMulArgs& args, const OutputBlock& block,
                     bool* b_packed) {
  constexpr int64_t kMr = Kernel::kMr;
  thread_local ScratchBuffer b_scratch;
  const int64_t k = args.k;
  const T* a = static_cast<const T*>(args.a);
  const int64_t n_padded = (block.n.size() + kMr - 1) / kMr * kMr;
  // Multiplies the panels of `block` by B rows [n0, n0 + nc) packed in pb
  // (for K block k0 at pb + k0 * nc_padded), K blocks [k_begin, k_end).
  const auto panels = [&](int64_t n0, int64_t nc, const float* pb,
                          int64_t nc_padded, int64_t k_begin, int64_t k_end,
                          bool prefetch_next) {
    for (int64_t m0 = block.m.begin; m0 < block.m.end; m0 += kPanelWidth) {
      const int cols =
          static_cast<int>(std::min(kPanelWidth, block.m.end - m0));
      const T* panel = a + (m0 / kPanelWidth) * kPanelWidth * k;
      float* c = args.dst + n0 * args.ldc + m0;
      for (int64_t k0 = k_begin; k0 < k_end; k0 += Kernel::kPackedKc) {
        const int64_t kc = std::min<int64_t>(Kernel::kPackedKc, k_end - k0);
        const T* pa = panel + k0 * kPanelWidth;
        const float* pbk = pb + (k0 - k_begin) * nc_padded;
        // The A block this thread reads next (the panel's next K block, or
        // the next panel's first): the micro-panels below prefetch it into
        // L2 in equal shares while they compute, so that the first of them
        // does not stall on memory when it gets there.
        const T* next = nullptr;
        int64_t next_kc = 0;
        if (!prefetch_next) {
          // Many micro-panels share each A block: the first one's wait for
          // memory is spread over all of them.
        } else if (k0 + kc < k_end) {
          next = pa + kc * kPanelWidth;
          next_kc = std::min<int64_t>(Kernel::kPackedKc, k_end - k0 - kc);
        } else if (m0 + kPanelWidth < block.m.end) {
          next = panel + kPanelWidth * k + k_begin * kPanelWidth;
          next_kc = std::min<int64_t>(Kernel::kPackedKc, k_end - k_begin);
        }
        const int64_t next_bytes =
            next_kc * kPanelWidth * static_cast<int64_t>(sizeof(T));
        const int64_t tiles = (nc + kMr - 1) / kMr;
        const int64_t share = (next_bytes / 64 + tiles - 1) / tiles * 64;
        for (int64_t j = 0; j < nc; j += kMr) {
          const int rows = static_cast<int>(std::min(kMr, nc - j));
          const int64_t first = std::min(next_bytes, j / kMr * share);
          const int64_t last = std::min(next_bytes, first + share);
          const char* prefetch = reinterpret_cast<const char*>(next);
          Kernel::template PanelTile<T>(
              rows, kc, pa, pbk + j * kc, c + j * args.ldc, args.ldc, cols,
              k0 > 0, prefetch + first, prefetch + last);
        }
      }
    }
  };
  if (n_padded * k <= kMaxWholeKB) {
    // Few rows of B: pack them for all of K, then stream each panel once
    // from start to end (the memory-bound case: GEMV and small batches).
    float* pb = b_scratch.Get(n_padded * k);
    if (!*b_packed) {
      for (int64_t k0 = 0; k0 < k; k0 += Kernel::kPackedKc) {
        const int64_t kc = std::min<int64_t>(Kernel::kPackedKc, k - k0);
        Kernel::PackB(args.b, args.ldb, block.n.begin, block.n.size(), k0, kc,
                      pb + k0 * n_padded);
      }
      *b_packed = true;
    }
    panels(block.n.begin, block.n.size(), pb, n_padded, 0, k,
           /*prefetch_next=*/true);
    return;
  }
  // Blocks of B rows and of K: each panel's K block is read once per B
  // block and reused from cache by all its micro-panels.
  *b_packed = false;
  const int64_t nc_max = std::min<int64_t>(Kernel::kPackedNc, n_padded);
  const int64_t kc_max = std::min<int64_t>(Kernel::kPackedKc, k);
  float* pb = b_scratch.Get(nc_max * kc_max);
  for (int64_t n0 = block.n.begin; n0 < block.n.end; n0 += Kernel::kPackedNc) {
    const int64_t nc = std::min<int64_t>(Kernel::kPackedNc, block.n.end - n0);
    const int64_t nc_padded = (nc + kMr - 1) / kMr * kMr;
    for (int64_t k0 = 0; k0 < k; k0 += Kernel::kPackedKc) {
      const int64_t kc = std::min<int64_t>(Kernel::kPackedKc, k - k0);
      Kernel::PackB(args.b, args.ldb, n0, nc, k0, kc, pb);
      panels(n0, nc, pb, nc_padded, k0, k0 + kc, /*prefetch_next=*/false);
    }
  }
}

template <typename Kernel, typename T>
void PackedGemmThreadTyped(const MatMulArgs& args, int ith, int nth) {
  bool b_packed = false;
  if (args.next_column != nullptr) {
    // Claimed column ranges (whole panels) span all of n, so B packed whole
    // for the first serves them all.
    while (true) {
      const Range m = ClaimColumns(*args.next_column, args.m, kPanelWidth,
                                   /*min_units=*/1, nth);
      if (m.size() == 0) return;
      PackedGemmBlock<Kernel, T>(args, OutputBlock{m, Range{0, args.n}},
                                 &b_packed);
    }
  }
  const OutputBlock block =
      PartitionOutput(args.m, args.n, kPanelWidth, Kernel::kMr, ith, nth);
  if (block.m.size() > 0 && block.n.size() > 0) {
    PackedGemmBlock<Kernel, T>(args, block, &b_packed);
  }
}

// Thread ith's share of MatMul(args) for a packed `a`.
template <typename Kernel>
void PackedGemmThread(const MatMulArgs& args, int ith, int nth) {
  switch (args.a_type) {
    case DType::kF16:
      return PackedGemmThreadTyped<Kernel, Half>(args, ith, nth);
    case DType::kBF16:
      return PackedGemmThreadTyped<Kernel, BFloat16>(args, ith, nth);
    default:
      return PackedGemmThreadTyped<Kernel, float>(args, ith, nth);
  }
}

}  // namespace cpu_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_INTERNAL_MAT_MUL_PACKED_H_
