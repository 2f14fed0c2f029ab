// Launchers of the CUDA kernels, one per kernel family. Each enqueues its
// kernel(s) on `stream` (nothing for an empty result) and returns the
// launch's own result (cudaLaunchKernelEx's, not the thread's last error,
// which an earlier call may have left set); none synchronizes. Pointers in the
// arguments are device addresses. The math lives in kernel_math.h.
#ifndef FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_DEVICE_KERNELS_H_
#define FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_DEVICE_KERNELS_H_

#include <cuda_runtime_api.h>

#include "ferry/backends/cuda/kernels/internal/desc.h"

namespace ferry {
namespace cuda_kernels_internal {

cudaError_t LaunchBinary(const BinaryArgs& args, cudaStream_t stream);
cudaError_t LaunchUnary(const UnaryArgs& args, cudaStream_t stream);
cudaError_t LaunchNorm(const NormArgs& args, cudaStream_t stream);
cudaError_t LaunchSoftMax(const SoftMaxArgs& args, cudaStream_t stream);
cudaError_t LaunchRope(const RopeArgs& args, cudaStream_t stream);
cudaError_t LaunchGetRows(const GetRowsArgs& args, cudaStream_t stream);
cudaError_t LaunchSetRows(const SetRowsArgs& args, cudaStream_t stream);
cudaError_t LaunchCopy(const CopyArgs& args, cudaStream_t stream);
cudaError_t LaunchConcat(const ConcatArgs& args, cudaStream_t stream);
// cudaErrorInvalidValue for a type without a block format.
cudaError_t LaunchQuantDot(const QuantDotArgs& args, cudaStream_t stream);
cudaError_t LaunchDequant(const DequantArgs& args, cudaStream_t stream);

}  // namespace cuda_kernels_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_KERNELS_INTERNAL_DEVICE_KERNELS_H_
