#include <cstdint>

#include "ferry/backends/cuda/kernels/internal/desc.h"
#include "ferry/backends/cuda/kernels/internal/host_emulation_kernels.h"
#include "ferry/backends/cuda/kernels/internal/kernel_math.h"
#include "ferry/backends/cuda/kernels/internal/quant_formats.h"

namespace ferry {
namespace cuda_kernels_internal {
namespace {

// What ElementKernel's threads do together, in order.
template <typename Op>
void EmulateElements(const typename Op::Args& args) {
  const int64_t count = Op::Count(args);
  for (int64_t e = 0; e < count; ++e) Op::Apply(args, e);
}

// What RowKernel's blocks do, with one thread per block.
template <typename Op>
void EmulateRows(const typename Op::Args& args) {
  if (args.dst.ne[0] <= 0) return;
  const int64_t rows = Op::Rows(args);
  SerialBlock block;
  for (int64_t row = 0; row < rows; ++row) Op::Apply(args, row, block);
}

}  // namespace

void EmulateBinary(const BinaryArgs& args) { EmulateElements<BinaryOp>(args); }

void EmulateUnary(const UnaryArgs& args) { EmulateElements<UnaryOp>(args); }

void EmulateNorm(const NormArgs& args) { EmulateRows<NormOp>(args); }

void EmulateSoftMax(const SoftMaxArgs& args) { EmulateRows<SoftMaxOp>(args); }

void EmulateRope(const RopeArgs& args) {
  EmulateElements<RopeTableOp>(args);
  EmulateRows<RopeOp>(args);
}

void EmulateGetRows(const GetRowsArgs& args) {
  DispatchFloatType(args.a.type, [&](auto a) {
    using A = typename decltype(a)::type;
    EmulateElements<GetRowsOp<A>>(args);
  });
}

void EmulateSetRows(const SetRowsArgs& args) {
  DispatchFloatType(args.dst.type, [&](auto d) {
    using D = typename decltype(d)::type;
    EmulateElements<SetRowsOp<D>>(args);
  });
}

void EmulateCopy(const CopyArgs& args) {
  DispatchCopyTypes(args.src.type, args.dst.type, [&](auto src, auto dst) {
    using Src = typename decltype(src)::type;
    using Dst = typename decltype(dst)::type;
    EmulateElements<CopyOp<Src, Dst>>(args);
  });
}

void EmulateConcat(const ConcatArgs& args) {
  DispatchRawType(args.dst.type, [&](auto raw) {
    using T = typename decltype(raw)::type;
    EmulateElements<ConcatOp<T>>(args);
  });
}

void EmulateQuantDot(const QuantDotArgs& args) {
  DispatchQuantType(args.a.type, [&](auto format) {
    EmulateRows<QuantDotOp<typename decltype(format)::type>>(args);
  });
}

void EmulateDequant(const DequantArgs& args) {
  DispatchQuantType(args.src.type, [&](auto format) {
    EmulateElements<DequantOp<typename decltype(format)::type>>(args);
  });
}

}  // namespace cuda_kernels_internal
}  // namespace ferry
