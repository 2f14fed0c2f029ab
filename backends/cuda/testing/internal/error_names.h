// CUDA's error names and descriptions for the fake runtime, generated from
// the CUDA 13.0 toolkit's driver_types.h (the first sentence of each
// enumerator's documentation).
#ifndef FERRY_BACKENDS_CUDA_TESTING_INTERNAL_ERROR_NAMES_H_
#define FERRY_BACKENDS_CUDA_TESTING_INTERNAL_ERROR_NAMES_H_

#include <cuda_runtime_api.h>

namespace ferry::fake_cuda_internal {

// nullptr for a value CUDA does not define.
const char* ErrorName(cudaError_t error);
const char* ErrorDescription(cudaError_t error);

}  // namespace ferry::fake_cuda_internal

#endif  // FERRY_BACKENDS_CUDA_TESTING_INTERNAL_ERROR_NAMES_H_
