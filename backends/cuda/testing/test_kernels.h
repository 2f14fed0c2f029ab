// Tiny kernels for CUDA backend tests and benchmarks (testonly): an empty
// kernel (launch cost), a spin kernel (busy for a set time, to hold a stream)
// and a kernel that writes to an illegal address (sticky errors).
#ifndef FERRY_BACKENDS_CUDA_TESTING_TEST_KERNELS_H_
#define FERRY_BACKENDS_CUDA_TESTING_TEST_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace ferry::cuda_testing {

// Enqueues a kernel that does nothing (one block of 32 threads).
absl::Status LaunchEmptyKernel(cudaStream_t stream);
// Enqueues a kernel that spins for `nanoseconds` of GPU time.
absl::Status LaunchSpinKernel(cudaStream_t stream, int64_t nanoseconds);
// Enqueues a kernel that writes through a bad pointer: the stream (and the
// context) fail with cudaErrorIllegalAddress when it runs.
absl::Status LaunchIllegalWriteKernel(cudaStream_t stream);

// The kernels' host addresses, as cudaLaunchKernel takes them (for the
// fake CUDA runtime's emulations of them).
const void* EmptyKernelAddress();
const void* SpinKernelAddress();
const void* IllegalWriteKernelAddress();
// The address IllegalWriteKernel writes to (32 floats).
float* IllegalAddress();

}  // namespace ferry::cuda_testing

#endif  // FERRY_BACKENDS_CUDA_TESTING_TEST_KERNELS_H_
