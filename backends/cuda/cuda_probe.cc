#include "ferry/backends/cuda/cuda_probe.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "ferry/backends/cuda/cuda_status.h"

namespace ferry {

absl::StatusOr<int> CudaDeviceCount() {
  static const absl::StatusOr<int>* const result = [] {
    int count = 0;
    absl::Status status =
        CudaToStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (status.ok() && count == 0) {
      status = absl::UnavailableError("cudaGetDeviceCount: no CUDA devices");
    }
    if (!status.ok()) {
      std::fprintf(stderr, "ferry: no CUDA device: %s\n",
                   std::string(status.message()).c_str());
      return new absl::StatusOr<int>(status);
    }
    return new absl::StatusOr<int>(count);
  }();
  return *result;
}

}  // namespace ferry
