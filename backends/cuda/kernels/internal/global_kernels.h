// The CUDA kernels' entry points: one __global__ template per kernel
// family, each running one thread's part of kernel_math.h's ops. Shared by
// the launchers (device_kernels.cu) and the fake runtime's emulations of
// them (testing/fake_kernel_emulators.cu), which register an emulation per
// instantiation. Device code: include only from .cu files.
#ifndef FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_GLOBAL_KERNELS_H_
#define FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_GLOBAL_KERNELS_H_

#ifndef __CUDACC__
#error "global_kernels.h is CUDA code: include it only from .cu files"
#endif

#include <cuda_runtime.h>

#include <cstdint>

#include "ferry/backends/cuda/kernels/internal/desc.h"
#include "ferry/backends/cuda/kernels/internal/index_math.h"
#include "ferry/backends/cuda/kernels/internal/kernel_math.h"
#include "ferry/backends/cuda/kernels/internal/quant_formats.h"

namespace ferry {
namespace cuda_kernels_internal {

// The hardware's warp shuffles and block barrier, for BlockReduce.
struct DeviceSync {
  __device__ float ShflXor(float v, int lane_mask) const {
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);
  }
  __device__ void SyncThreads() const { __syncthreads(); }
};

__device__ inline GridPosition ThisThreadPosition() {
  return GridPosition{blockIdx.x, gridDim.x, threadIdx.x, blockDim.x};
}

template <typename Op>
__global__ void ElementKernel(typename Op::Args args, int64_t count) {
  RunElementThread<Op>(args, count, ThisThreadPosition());
}

// One block per row (blockDim.x a multiple of 32).
template <typename Op>
__global__ void RowKernel(typename Op::Args args, int64_t rows) {
  __shared__ float shared[32];
  DeviceSync sync;
  SyncBlock<DeviceSync> block{threadIdx.x, blockDim.x, shared, &sync};
  RunRowThread<Op>(args, rows, ThisThreadPosition(), block);
}

// Calls fn(TypeTag<Format>{}) for every block format the kernels read.
template <typename Fn>
void ForEachQuantFormat(Fn&& fn) {
  for (ElemType type :
       {ElemType::kQ4_0, ElemType::kQ4_1, ElemType::kQ5_0, ElemType::kQ5_1,
        ElemType::kQ8_0, ElemType::kQ2_K, ElemType::kQ3_K, ElemType::kQ4_K,
        ElemType::kQ5_K, ElemType::kQ6_K, ElemType::kIQ4_NL,
        ElemType::kIQ4_XS}) {
    DispatchQuantType(type, fn);
  }
}

// Calls fn(ElementKernel<Op> tag) for every element op the launchers
// instantiate, and fn for every row op; the emulations register each.
template <typename Fn>
void ForEachElementOp(Fn&& fn) {
  fn(TypeTag<BinaryOp>{});
  fn(TypeTag<UnaryOp>{});
  fn(TypeTag<RopeTableOp>{});
  for (ElemType type : {ElemType::kF32, ElemType::kF16, ElemType::kBF16}) {
    DispatchFloatType(type, [&](auto a) {
      fn(TypeTag<GetRowsOp<typename decltype(a)::type>>{});
      fn(TypeTag<SetRowsOp<typename decltype(a)::type>>{});
    });
  }
  constexpr ElemType kTypes[] = {ElemType::kF32, ElemType::kF16,
                                 ElemType::kBF16, ElemType::kI32};
  for (ElemType src : kTypes) {
    for (ElemType dst : kTypes) {
      if ((src == ElemType::kI32) != (dst == ElemType::kI32)) continue;
      DispatchCopyTypes(src, dst, [&](auto s, auto d) {
        fn(TypeTag<
            CopyOp<typename decltype(s)::type, typename decltype(d)::type>>{});
      });
    }
  }
  for (ElemType type : kTypes) {
    DispatchRawType(type, [&](auto raw) {
      fn(TypeTag<ConcatOp<typename decltype(raw)::type>>{});
    });
  }
  ForEachQuantFormat([&](auto format) {
    fn(TypeTag<DequantOp<typename decltype(format)::type>>{});
  });
}

template <typename Fn>
void ForEachRowOp(Fn&& fn) {
  fn(TypeTag<NormOp>{});
  fn(TypeTag<SoftMaxOp>{});
  fn(TypeTag<RopeOp>{});
  ForEachQuantFormat([&](auto format) {
    fn(TypeTag<QuantDotOp<typename decltype(format)::type>>{});
  });
}

}  // namespace cuda_kernels_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_GLOBAL_KERNELS_H_
