#include <cuda_runtime.h>

#include "ferry/backends/cuda/cuda_status.h"
#include "ferry/backends/cuda/vector_add.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace {

__global__ void AddKernel(const float* a, const float* b, float* out,
                          size_t n) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

}  // namespace

absl::Status CudaVectorAdd(const float* a, const float* b, float* out,
                           size_t n) {
  const size_t bytes = n * sizeof(float);
  float* device = nullptr;
  FERRY_CUDA_RETURN_IF_ERROR(cudaMalloc(&device, 3 * bytes));
  absl::Status status = [&]() -> absl::Status {
    FERRY_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(device, a, bytes, cudaMemcpyHostToDevice));
    FERRY_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(device + n, b, bytes, cudaMemcpyHostToDevice));
    const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
    AddKernel<<<blocks, 256>>>(device, device + n, device + 2 * n, n);
    FERRY_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    FERRY_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(out, device + 2 * n, bytes, cudaMemcpyDeviceToHost));
    return absl::OkStatus();
  }();
  const absl::Status freed = CudaToStatus(cudaFree(device), "cudaFree");
  return status.ok() ? freed : status;
}

}  // namespace ferry
