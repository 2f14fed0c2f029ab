#include "ferry/backends/host/kernels/mat_mul_node.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ferry/backends/host/internal/mat_mul.h"
#include "ferry/backends/host/internal/packed_layout.h"
#include "ferry/backends/host/internal/quant_mat_mul.h"
#include "ferry/backends/host/kernels/internal/spin_barrier.h"
#include "ferry/backends/host/packed_state.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/tensor.h"
#include "ferry/quant/quant_dtype.h"

namespace ferry {
namespace cpu_kernels {
namespace {

using cpu_internal::MatMul;
using cpu_internal::MatMulArgs;
using cpu_internal::PackedLayout;
using cpu_internal::QuantMatMulArgs;

// Slices of at most this many multiply-adds are computed whole by one thread
// when there are at least nth of them (attention's per-head products): cutting
// them among threads would leave each a sliver of a few tiles and make every
// thread pack its own copy of the slice's b, while whole slices cost nothing
// to split. Larger slices are cut among all threads, which keeps their
// operands shared in cache.
constexpr int64_t kMaxWholeSliceMacs = int64_t{1} << 22;

// The 2-D slice (i2, i3) of mul_mat `node` as MatMul operands; `a_packed`
// says whether a is stored in panels (then its slices are packed slices).
MatMulArgs SliceArgs(const Tensor& node, bool a_packed, int64_t i2,
                     int64_t i3) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int64_t r2 = b.ne[2] / a.ne[2];
  const int64_t r3 = b.ne[3] / a.ne[3];
  MatMulArgs args;
  args.a_type = a.dtype;
  if (a_packed) {
    const PackedLayout layout(a.dtype, a.ne);
    const int64_t slice = (i2 / r2) + (i3 / r3) * a.ne[2];
    args.a = static_cast<const std::byte*>(a.data) +
             slice * layout.SliceElements() * layout.element_bytes();
    args.a_packed = true;
    args.lda = a.ne[0];
  } else {
    args.a = static_cast<const std::byte*>(a.data) + (i2 / r2) * a.nb[2] +
             (i3 / r3) * a.nb[3];
    args.lda = a.nb[1] / a.ElementSize();
  }
  args.b = reinterpret_cast<const float*>(
      static_cast<const std::byte*>(b.data) + i2 * b.nb[2] + i3 * b.nb[3]);
  args.ldb = b.nb[1] / static_cast<int64_t>(sizeof(float));
  args.dst = reinterpret_cast<float*>(static_cast<std::byte*>(node.data) +
                                      i2 * node.nb[2] + i3 * node.nb[3]);
  args.ldc = node.nb[1] / static_cast<int64_t>(sizeof(float));
  args.m = a.ne[1];
  args.n = b.ne[1];
  args.k = a.ne[0];
  return args;
}

// MatMul(args, ith, nth), also for views whose rows of a or b overlap
// (stride below k elements), which MatMul does not take: those go one row
// per call. The stride of a single row is never read, so it is set to k.
void SliceMatMul(const MatMulArgs& args, int ith, int nth) {
  if (!args.a_packed && args.m > 1 && args.lda < args.k) {
    MatMulArgs row = args;
    row.m = 1;
    const int64_t row_bytes = args.lda * DTypeBlockBytes(args.a_type);
    for (int64_t i = 0; i < args.m; ++i) {
      row.a = static_cast<const std::byte*>(args.a) + i * row_bytes;
      row.dst = args.dst + i;
      SliceMatMul(row, ith, nth);
    }
    return;
  }
  if (args.n > 1 && args.ldb < args.k) {
    MatMulArgs row = args;
    row.n = 1;
    for (int64_t j = 0; j < args.n; ++j) {
      row.b = args.b + j * args.ldb;
      row.dst = args.dst + j * args.ldc;
      SliceMatMul(row, ith, nth);
    }
    return;
  }
  if (!args.a_packed && args.m == 1 && args.lda < args.k) {
    MatMulArgs fixed = args;
    fixed.lda = args.k;
    return SliceMatMul(fixed, ith, nth);
  }
  if (args.n == 1 && args.ldb < args.k) {
    MatMulArgs fixed = args;
    fixed.ldb = args.k;
    return SliceMatMul(fixed, ith, nth);
  }
  MatMul(args, ith, nth);
}

// The operands of a quantized mul_mat but for its slice's pointers.
QuantMatMulArgs QuantShapeArgs(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  QuantMatMulArgs args;
  args.a_type = quant::QuantTypeOf(a.dtype);
  args.a_row_bytes = a.nb[1];
  // A contiguous packed a: slices stay at a.nb[2] apart (whole groups).
  args.a_grouped = GetPackedState(a) == PackedState::kPacked;
  args.ldb = b.nb[1] / static_cast<int64_t>(sizeof(float));
  args.ldc = node.nb[1] / static_cast<int64_t>(sizeof(float));
  args.m = a.ne[1];
  args.n = b.ne[1];
  args.k = a.ne[0];
  return args;
}

// Bytes at the start of a quantized mul_mat's scratch that its threads
// share: b quantized once (one slice, where QuantMatMul would have every
// thread quantize all of it); the threads' slices follow.
size_t SharedQuantizedBBytes(const Tensor& node, int nth) {
  const Tensor& b = *node.src[1];
  const QuantMatMulArgs args = QuantShapeArgs(node);
  if (b.ne[2] * b.ne[3] != 1 || !cpu_internal::SharesQuantizedB(args, nth)) {
    return 0;
  }
  return RoundUpToScratchAlignment(
      cpu_internal::QuantizedBBytes(args.a_type, args.n, args.k));
}

// mul_mat with a quantized `a`: slice by slice, all threads sharing each;
// a single slice (a weight product) hands out work from ctx.work_counter.
void QuantMatMulNode(const Tensor& node, int ith, int nth,
                     const KernelContext& ctx) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int64_t r2 = b.ne[2] / a.ne[2];
  const int64_t r3 = b.ne[3] / a.ne[3];
  const int64_t slices = b.ne[2] * b.ne[3];
  const size_t shared = SharedQuantizedBBytes(node, nth);
  auto* const shared_b = static_cast<std::byte*>(ctx.scratch);
  const size_t slice_bytes = (ctx.scratch_bytes - shared) /
                             static_cast<size_t>(nth) / kScratchAlignment *
                             kScratchAlignment;
  void* scratch = shared_b + shared + slice_bytes * static_cast<size_t>(ith);
  QuantMatMulArgs args = QuantShapeArgs(node);
  args.next = slices == 1 ? ctx.work_counter : nullptr;
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t i2 = s % b.ne[2];
    const int64_t i3 = s / b.ne[2];
    args.a = static_cast<const std::byte*>(a.data) + (i2 / r2) * a.nb[2] +
             (i3 / r3) * a.nb[3];
    args.b = reinterpret_cast<const float*>(
        static_cast<const std::byte*>(b.data) + i2 * b.nb[2] + i3 * b.nb[3]);
    args.dst = reinterpret_cast<float*>(static_cast<std::byte*>(node.data) +
                                        i2 * node.nb[2] + i3 * node.nb[3]);
    if (shared > 0 && ctx.barrier != nullptr) {
      // Each thread quantizes its share of b's rows; after the wait all
      // read all of them.
      cpu_internal::QuantizeB(args, args.n * ith / nth,
                              args.n * (ith + 1) / nth, shared_b);
      ctx.barrier->ArriveAndWait();
      args.quantized_b = shared_b;
    }
    cpu_internal::QuantMatMul(args, ith, nth, scratch);
  }
}

}  // namespace

size_t MatMulScratchBytes(const Tensor& node, int nth) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  if (!IsQuantized(a.dtype)) return 0;
  const size_t per_thread = cpu_internal::QuantMatMulScratchBytes(
      quant::QuantTypeOf(a.dtype), a.ne[1], b.ne[1], a.ne[0], nth);
  // Whole cache lines per thread, so threads never share one.
  return SharedQuantizedBBytes(node, nth) +
         RoundUpToScratchAlignment(per_thread) * static_cast<size_t>(nth);
}

void MatMulNode(const Tensor& node, int ith, int nth,
                const KernelContext& ctx) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int64_t m = a.ne[1];
  const int64_t n = b.ne[1];
  const int64_t k = a.ne[0];
  const int64_t slices = b.ne[2] * b.ne[3];
  if (m == 0 || n == 0 || slices == 0) return;
  if (IsQuantized(a.dtype)) return QuantMatMulNode(node, ith, nth, ctx);
  if (k == 0) {
    // Empty sums; dst is contiguous.
    const int64_t size = node.NumElements();
    const int64_t begin = size * ith / nth;
    const int64_t end = size * (ith + 1) / nth;
    std::memset(static_cast<float*>(node.data) + begin, 0,
                static_cast<size_t>(end - begin) * sizeof(float));
    return;
  }
  const bool a_packed = GetPackedState(a) == PackedState::kPacked;
  const auto slice = [&](int64_t s) {
    return SliceArgs(node, a_packed, s % b.ne[2], s / b.ne[2]);
  };
  // Slices [0, whole) go whole to the threads, a contiguous run each (so
  // that slices sharing a broadcast a stay on one thread); all threads then
  // share each of the nth - 1 or fewer slices left, in the same order.
  int64_t whole = 0;
  if (nth > 1 && slices >= nth && m * n * k <= kMaxWholeSliceMacs) {
    whole = slices - slices % nth;
    const int64_t per_thread = whole / nth;
    for (int64_t s = ith * per_thread; s < (ith + 1) * per_thread; ++s) {
      SliceMatMul(slice(s), 0, 1);
    }
  }
  if (a_packed && slices - whole == 1 && nth > 1 &&
      ctx.work_counter != nullptr) {
    // One weight product shared by all threads (the common case): claim
    // panels. A packed a never takes SliceMatMul's row-by-row detours.
    MatMulArgs args = slice(whole);
    args.next_column = ctx.work_counter;
    MatMul(args, ith, nth);
    return;
  }
  for (int64_t s = whole; s < slices; ++s) SliceMatMul(slice(s), ith, nth);
}

}  // namespace cpu_kernels
}  // namespace ferry
