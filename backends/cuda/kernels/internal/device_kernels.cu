#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ferry/backends/cuda/kernels/internal/desc.h"
#include "ferry/backends/cuda/kernels/internal/device_kernels.h"
#include "ferry/backends/cuda/kernels/internal/kernel_math.h"

namespace ferry {
namespace cuda_kernels_internal {
namespace {

constexpr int kElementThreads = 256;
constexpr int64_t kMaxElementBlocks = int64_t{1} << 16;  // Grid-stride beyond.
constexpr int kMaxRowThreads = 256;
constexpr int64_t kMaxRowBlocks = int64_t{1} << 20;

// Threads of one row block; row ops call Sum/Max from every thread of the
// block (they are __syncthreads barriers).
struct DeviceBlock {
  int64_t tid;
  int64_t nt;
  float* shared;  // 32 floats.

  __device__ float Reduce(float v, bool max) const {
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, v, offset);
      v = max ? fmaxf(v, other) : v + other;
    }
    const int warp = static_cast<int>(tid) / 32;
    const int warps = static_cast<int>((nt + 31) / 32);
    if (tid % 32 == 0) shared[warp] = v;
    __syncthreads();
    float total = shared[0];
    for (int w = 1; w < warps; ++w) {
      total = max ? fmaxf(total, shared[w]) : total + shared[w];
    }
    __syncthreads();  // shared is free again for the next reduction.
    return total;
  }
  __device__ float Sum(float v) const { return Reduce(v, false); }
  __device__ float Max(float v) const { return Reduce(v, true); }
};

template <typename Op>
__global__ void ElementKernel(typename Op::Args args, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       e < count; e += stride) {
    Op::Apply(args, e);
  }
}

// One block per row (blockDim.x a multiple of 32); every thread of a block
// walks the same rows, so the reductions' barriers line up.
template <typename Op>
__global__ void RowKernel(typename Op::Args args, int64_t rows) {
  __shared__ float shared[32];
  DeviceBlock block{threadIdx.x, blockDim.x, shared};
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    Op::Apply(args, row, block);
  }
}

template <typename Op>
cudaError_t LaunchElements(const typename Op::Args& args, cudaStream_t stream) {
  const int64_t count = Op::Count(args);
  if (count <= 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>(
      (count + kElementThreads - 1) / kElementThreads, kMaxElementBlocks);
  ElementKernel<Op>
      <<<static_cast<unsigned>(blocks), kElementThreads, 0, stream>>>(args,
                                                                      count);
  return cudaGetLastError();
}

// Threads per row block: enough warps for `width` items, at most 256.
int RowThreads(int64_t width) {
  const int64_t warps = std::max<int64_t>(1, (width + 31) / 32);
  return static_cast<int>(std::min<int64_t>(warps * 32, kMaxRowThreads));
}

template <typename Op>
cudaError_t LaunchRows(const typename Op::Args& args, int64_t width,
                       cudaStream_t stream) {
  const int64_t rows = Op::Rows(args);
  if (rows <= 0 || args.dst.ne[0] <= 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>(rows, kMaxRowBlocks);
  RowKernel<Op>
      <<<static_cast<unsigned>(blocks), RowThreads(width), 0, stream>>>(args,
                                                                        rows);
  return cudaGetLastError();
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

}  // namespace cuda_kernels_internal
}  // namespace ferry
