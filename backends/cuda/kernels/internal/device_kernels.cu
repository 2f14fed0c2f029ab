#include <cuda_runtime.h>

#include <cstdint>

#include "ferry/backends/cuda/kernels/internal/desc.h"
#include "ferry/backends/cuda/kernels/internal/device_kernels.h"
#include "ferry/backends/cuda/kernels/internal/global_kernels.h"
#include "ferry/backends/cuda/kernels/internal/index_math.h"
#include "ferry/backends/cuda/kernels/internal/kernel_math.h"
#include "ferry/backends/cuda/kernels/internal/quant_formats.h"

namespace ferry {
namespace cuda_kernels_internal {
namespace {

// Launches `kernel` and returns this launch's own result. The thread's
// last-error slot is never read (an earlier call's error, e.g. a not-ready
// event query, must not pass for this launch's) and is left clear when the
// launch fails, since the error is returned.
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), int64_t blocks, int threads,
                         cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  const cudaError_t error =
      cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (error != cudaSuccess) (void)cudaGetLastError();
  return error;
}

template <typename Op>
cudaError_t LaunchElements(const typename Op::Args& args, cudaStream_t stream) {
  const int64_t count = Op::Count(args);
  if (count <= 0) return cudaSuccess;
  return LaunchKernel(ElementKernel<Op>, ElementBlocks(count), kElementThreads,
                      stream, args, count);
}

template <typename Op>
cudaError_t LaunchRows(const typename Op::Args& args, int64_t width,
                       cudaStream_t stream) {
  const int64_t rows = Op::Rows(args);
  if (rows <= 0 || args.dst.ne[0] <= 0) return cudaSuccess;
  return LaunchKernel(RowKernel<Op>, RowBlocks(rows), RowThreads(width), stream,
                      args, rows);
}

}  // namespace

cudaError_t LaunchBinary(const BinaryArgs& args, cudaStream_t stream) {
  return LaunchElements<BinaryOp>(args, stream);
}

cudaError_t LaunchUnary(const UnaryArgs& args, cudaStream_t stream) {
  return LaunchElements<UnaryOp>(args, stream);
}

cudaError_t LaunchNorm(const NormArgs& args, cudaStream_t stream) {
  return LaunchRows<NormOp>(args, args.dst.ne[0], stream);
}

cudaError_t LaunchSoftMax(const SoftMaxArgs& args, cudaStream_t stream) {
  return LaunchRows<SoftMaxOp>(args, args.dst.ne[0], stream);
}

cudaError_t LaunchRope(const RopeArgs& args, cudaStream_t stream) {
  if (const cudaError_t error = LaunchElements<RopeTableOp>(args, stream);
      error != cudaSuccess) {
    return error;
  }
  return LaunchRows<RopeOp>(args, args.n_dims / 2, stream);
}

cudaError_t LaunchGetRows(const GetRowsArgs& args, cudaStream_t stream) {
  cudaError_t error = cudaSuccess;
  DispatchFloatType(args.a.type, [&](auto a) {
    using A = typename decltype(a)::type;
    error = LaunchElements<GetRowsOp<A>>(args, stream);
  });
  return error;
}

cudaError_t LaunchSetRows(const SetRowsArgs& args, cudaStream_t stream) {
  cudaError_t error = cudaSuccess;
  DispatchFloatType(args.dst.type, [&](auto d) {
    using D = typename decltype(d)::type;
    error = LaunchElements<SetRowsOp<D>>(args, stream);
  });
  return error;
}

cudaError_t LaunchCopy(const CopyArgs& args, cudaStream_t stream) {
  cudaError_t error = cudaSuccess;
  DispatchCopyTypes(args.src.type, args.dst.type, [&](auto src, auto dst) {
    using Src = typename decltype(src)::type;
    using Dst = typename decltype(dst)::type;
    error = LaunchElements<CopyOp<Src, Dst>>(args, stream);
  });
  return error;
}

cudaError_t LaunchConcat(const ConcatArgs& args, cudaStream_t stream) {
  cudaError_t error = cudaSuccess;
  DispatchRawType(args.dst.type, [&](auto raw) {
    using T = typename decltype(raw)::type;
    error = LaunchElements<ConcatOp<T>>(args, stream);
  });
  return error;
}

cudaError_t LaunchQuantDot(const QuantDotArgs& args, cudaStream_t stream) {
  cudaError_t error = cudaErrorInvalidValue;
  DispatchQuantType(args.a.type, [&](auto format) {
    using Format = typename decltype(format)::type;
    error = LaunchRows<QuantDotOp<Format>>(args, args.a.ne[0], stream);
  });
  return error;
}

cudaError_t LaunchDequant(const DequantArgs& args, cudaStream_t stream) {
  cudaError_t error = cudaErrorInvalidValue;
  DispatchQuantType(args.src.type, [&](auto format) {
    using Format = typename decltype(format)::type;
    error = LaunchElements<DequantOp<Format>>(args, stream);
  });
  return error;
}

}  // namespace cuda_kernels_internal
}  // namespace ferry
