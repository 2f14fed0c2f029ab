// Turns CUDA runtime errors into absl::Status values that name the call.
#ifndef FERRY_BACKENDS_CUDA_CUDA_STATUS_H_
#define FERRY_BACKENDS_CUDA_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ferry {

// Returns OK for cudaSuccess, else a status whose message names `context`
// (e.g. "cudaMemcpyAsync(h2d, 4096 bytes)") and the CUDA error.
absl::Status CudaToStatus(cudaError_t error, absl::string_view context);

// For calls whose failure changes nothing (cleanup, best-effort queries):
// takes a non-sticky error out of the thread's last-error slot, so it is
// not mistaken later for another call's (a sticky error stays: CUDA never
// clears it). ferry leaves no error of its own pending on any thread.
inline void IgnoreCudaError(cudaError_t error) {
  if (error != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace ferry

#define FERRY_CUDA_RETURN_IF_ERROR(call) \
  FERRY_RETURN_IF_ERROR(::ferry::CudaToStatus((call), #call))

#endif  // FERRY_BACKENDS_CUDA_CUDA_STATUS_H_
