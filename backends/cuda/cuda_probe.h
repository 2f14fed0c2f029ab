// Finds CUDA devices. Without a GPU or driver, says why once on stderr and
// reports none, so callers carry on without CUDA.
#ifndef FERRY_BACKENDS_CUDA_CUDA_PROBE_H_
#define FERRY_BACKENDS_CUDA_CUDA_PROBE_H_

#include "absl/status/statusor.h"

namespace ferry {

// Returns the number of usable CUDA devices, or Unavailable (with CUDA's
// reason, e.g. "CUDA driver version is insufficient") when there are none.
absl::StatusOr<int> CudaDeviceCount();

}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_CUDA_PROBE_H_
