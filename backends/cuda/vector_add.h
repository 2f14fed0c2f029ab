// A minimal CUDA kernel that proves the nvcc toolchain end to end: adds two
// f32 vectors on device 0.
#ifndef FERRY_BACKENDS_CUDA_VECTOR_ADD_H_
#define FERRY_BACKENDS_CUDA_VECTOR_ADD_H_

#include <cstddef>

#include "absl/status/status.h"

namespace ferry {

// Computes out[i] = a[i] + b[i] on the GPU for host arrays of length n.
absl::Status CudaVectorAdd(const float* a, const float* b, float* out,
                           size_t n);

}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_VECTOR_ADD_H_
