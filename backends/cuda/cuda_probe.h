// Finds CUDA devices. Without a GPU or driver, says why once on stderr and
// reports none, so callers carry on without CUDA.
#ifndef FERRY_BACKENDS_CUDA_CUDA_PROBE_H_
#define FERRY_BACKENDS_CUDA_CUDA_PROBE_H_

#include <string>

#include "absl/status/statusor.h"

namespace ferry {

// Returns the number of usable CUDA devices, or Unavailable (with CUDA's
// reason, e.g. "CUDA driver version is insufficient", and the driver's and
// runtime's versions) when there are none.
absl::StatusOr<int> CudaDeviceCount();

// The CUDA driver's and runtime's versions, e.g. "driver 12.8 (12080),
// runtime 13.0 (13000)"; "no driver" for a missing one. Creates no context.
std::string CudaVersionString();

}  // namespace ferry

#endif  // FERRY_BACKENDS_CUDA_CUDA_PROBE_H_
