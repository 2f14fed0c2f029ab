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

// <<<...>>> leaves errors in the thread's last-error slot: clear it first,
// so an earlier call's error is not taken for this launch's.
absl::Status LaunchEmptyKernel(cudaStream_t stream) {
  (void)cudaGetLastError();
  EmptyKernel<<<1, 32, 0, stream>>>();
  return CudaToStatus(cudaGetLastError(), "EmptyKernel launch");
}

absl::Status LaunchSpinKernel(cudaStream_t stream, int64_t nanoseconds) {
  (void)cudaGetLastError();
  SpinKernel<<<1, 1, 0, stream>>>(nanoseconds);
  return CudaToStatus(cudaGetLastError(), "SpinKernel launch");
}

absl::Status LaunchIllegalWriteKernel(cudaStream_t stream) {
  (void)cudaGetLastError();
  IllegalWriteKernel<<<1, 32, 0, stream>>>(IllegalAddress());
  return CudaToStatus(cudaGetLastError(), "IllegalWriteKernel launch");
}

const void* EmptyKernelAddress() {
  return reinterpret_cast<const void*>(&EmptyKernel);
}

const void* SpinKernelAddress() {
  return reinterpret_cast<const void*>(&SpinKernel);
}

const void* IllegalWriteKernelAddress() {
  return reinterpret_cast<const void*>(&IllegalWriteKernel);
}

// An address no allocation ever has.
float* IllegalAddress() { return reinterpret_cast<float*>(uintptr_t{0x10}); }

}  // namespace ferry::cuda_testing
