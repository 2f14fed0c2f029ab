#include <cuda_runtime.h>

#include "ferry/backends/cuda/cuda_status.h"
#include "ferry/backends/cuda/testing/test_kernels.h"

namespace ferry::cuda_testing {
namespace {

__global__ void EmptyKernel() {}

__device__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SpinKernel(int64_t nanoseconds) {
  const uint64_t start = GlobalTimerNs();
  while (GlobalTimerNs() - start < static_cast<uint64_t>(nanoseconds)) {
  }
}

__global__ void IllegalWriteKernel(float* bad) { bad[threadIdx.x] = 1.0f; }

}  // namespace

absl::Status LaunchEmptyKernel(cudaStream_t stream) {
  EmptyKernel<<<1, 32, 0, stream>>>();
  return CudaToStatus(cudaGetLastError(), "EmptyKernel launch");
}

absl::Status LaunchSpinKernel(cudaStream_t stream, int64_t nanoseconds) {
  SpinKernel<<<1, 1, 0, stream>>>(nanoseconds);
  return CudaToStatus(cudaGetLastError(), "SpinKernel launch");
}

absl::Status LaunchIllegalWriteKernel(cudaStream_t stream) {
  // An address no allocation ever has.
  float* bad = reinterpret_cast<float*>(uintptr_t{0x10});
  IllegalWriteKernel<<<1, 32, 0, stream>>>(bad);
  return CudaToStatus(cudaGetLastError(), "IllegalWriteKernel launch");
}

}  // namespace ferry::cuda_testing
