#include "ferry/backends/cuda/testing/cuda_test_util.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ferry/backends/cuda/cuda_probe.h"
#include "ferry/backends/registry.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::cuda_testing {

std::string CudaVersions() { return CudaVersionString(); }

bool GpuRequired() {
  const char* value = std::getenv("FERRY_REQUIRE_GPU");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

absl::Status CheckCudaDevices(int count) {
  absl::StatusOr<int> found = CudaDeviceCount();
  if (!found.ok()) {
    return absl::UnavailableError(
        absl::StrCat("no usable CUDA device: ", found.status().message(), " [",
                     CudaVersions(), "]"));
  }
  if (*found < count) {
    return absl::FailedPreconditionError(
        absl::StrCat("needs ", count, " CUDA devices, this machine has ",
                     *found, " [", CudaVersions(), "]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CudaDevice*> GlobalCudaDevice(int ordinal) {
  Registry& registry = Registry::Global();
  FERRY_RETURN_IF_ERROR(RegisterCudaFamily(registry));
  const std::string name = absl::StrCat("cuda", ordinal);
  absl::StatusOr<Device*> device = registry.FindDevice(name);
  if (!device.ok()) {
    device = registry.AddDevice("cuda", ordinal);
    if (absl::IsAlreadyExists(device.status())) {
      device = registry.FindDevice(name);  // Made by another thread.
    }
  }
  FERRY_RETURN_IF_ERROR(device.status());
  return static_cast<CudaDevice*>(*device);
}

}  // namespace ferry::cuda_testing
